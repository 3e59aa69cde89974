"""dynbranch services: gateway, admission, csl, delivery, engine agent and their shared runtime."""
