"""Regenerate tests/data/golden_cells.json (only when a change of identity is intended and said so)."""
import json, glob, sys
sys.path.insert(0, str(__import__('pathlib').Path(__file__).resolve().parents[1]))
from specjoule import config, cells
out = {}
for p in sorted(glob.glob('config/*.yaml')) + sorted(glob.glob('validation/**/*.yaml', recursive=True)):
    if p.endswith('schema.yaml') or 'corpora' in p: continue
    cfg = config.load(p)
    t = cells.build(cfg)
    groups = {c.record_path: g.group_id for g in t.engine_groups().values() for c in g.cells}
    out[p] = {c.record_path: [c.cell_id, c.engine_key, c.run_order_index, c.family_id, groups[c.record_path]] for c in t.cells}
json.dump(out, open('tests/data/golden_cells.json','w'), indent=0, sort_keys=True)
