"""The modules of scripts/gen_api.py, one per job."""
