"""What opforge's library becomes outside the daemon: exported packages, model checks."""
