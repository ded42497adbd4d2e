raise NotImplementedError("scripts/derive.py is being written")
