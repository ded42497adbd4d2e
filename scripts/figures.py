raise NotImplementedError("scripts/figures.py is being written")
