"""Static linter for candidate kernels: rules are YAML profiles under config/linter/."""

from .engine import lint_source, parse_source
from .profile import Profile, ProfileError, config_dir, load_profile

__all__ = ["Profile", "ProfileError", "config_dir", "lint_source", "load_profile", "parse_source"]
