raise NotImplementedError("scripts/run_cell.py is being written")
