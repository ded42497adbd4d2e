raise NotImplementedError("scripts/aggregate.py is being written")
