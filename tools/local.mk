# Installed tools.
