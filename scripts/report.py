raise NotImplementedError("scripts/report.py is being written")
