"""Run by tccl.launch in tests/python/test_launch.py.

  launch_worker.py ok        every rank: print its variables, all-reduce 2r+1, print the sum
  launch_worker.py fail N    rank 1 exits with status N at once; the others block for a minute
"""

import json
import os
import sys
import time

import numpy as np


def main():
    mode = sys.argv[1]
    rank = int(os.environ["RANK"])
    if mode == "fail":
        if rank == 1:
            sys.exit(int(sys.argv[2]))
        time.sleep(60)  # must be killed by the launcher long before this ends
        return 0
    import tccl

    c = tccl.init_process_group()  # MASTER_ADDR/MASTER_PORT: rank 0 hosts the store
    x = np.array([2 * c.rank + 1], dtype=np.float64)
    c.all_reduce(x)
    keys = ["RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
            "TCCL_RANK", "TCCL_WORLD_SIZE"]
    print(json.dumps({"env": {k: os.environ.get(k) for k in keys}, "sum": x[0]}), flush=True)
    tccl.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
