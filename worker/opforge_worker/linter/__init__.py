"""Static linter for candidate kernels: rules are YAML profiles under data/linter/."""

from .engine import lint_source, parse_source
from .profile import Profile, ProfileError, load_profile, profiles_dir

__all__ = ["Profile", "ProfileError", "lint_source", "load_profile", "parse_source", "profiles_dir"]
