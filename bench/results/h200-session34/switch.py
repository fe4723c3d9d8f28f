"""Session 34: run a script with the GIL's switch interval set first.

    python switch.py SECONDS SCRIPT [ARGS...]
"""
import runpy
import sys

sys.setswitchinterval(float(sys.argv[1]))
script = sys.argv[2]
sys.argv = [script, *sys.argv[3:]]
runpy.run_path(script, run_name="__main__")
