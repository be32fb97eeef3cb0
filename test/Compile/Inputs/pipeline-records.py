"""Checks the pipeline-send records of plan.json files (plan-collectives.test):
per boundary a forward and an input_grad record over pp; grouped by the
device that sends them (boundary b after virtual stage b - 1, on pipeline
rank (b - 1) mod p), the busiest device's records take the step's pipeline
send time."""
import json
import sys

for path in sys.argv[1:]:
    p = json.load(open(path))
    stages = p['mesh']['pipeline_stages']
    records = [c for c in p['communication'] if c['source'] == 'pipeline']
    assert all(c['axes'] == ['pp'] and c['kind'] == 'point-to-point' and
               c['bytes'] > 0 for c in records), records
    ops = []
    for c in records:
        if c['op'] not in ops:
            ops.append(c['op'])
    for op in ops:
        phases = sorted(c['phase'] for c in records if c['op'] == op)
        assert phases == ['forward', 'input_grad'], (op, phases)
    per_device = [0.0] * stages
    for b, op in enumerate(ops, start=1):
        per_device[(b - 1) % stages] += sum(
            c['seconds'] for c in records if c['op'] == op)
    want = p['step']['pipeline_send_s']
    got = max(per_device)
    assert abs(got - want) <= 1e-9 * want, (path, per_device, want)
    print('pipeline sends', len(records), 'records, boundaries', ' '.join(ops))
