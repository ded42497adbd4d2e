raise NotImplementedError("scripts/checks.py is being written")
