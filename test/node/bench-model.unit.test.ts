// The bench's capacity model and its CPU attribution (scripts/lib/bench/model.ts, objects.ts):
// the ceilings it computes from calls per purchase, the class it names, which object a profile
// sample's CPU goes to, and the calls waited on one after another under the object delay.
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { callsWaited, capacityModel, modelInputs, objectsPerGoods } from '../../scripts/lib/bench/model.ts';
import { bundleModules, byClass, classOfFile, cpuByClass, purchasesPerStockCall } from '../../scripts/lib/bench/objects.ts';
import type { CpuProfile } from '../../scripts/lib/bench/profile.ts';

describe('the capacity model', () => {
  const calls = {
    GoodsStock: { calls: 100, items: 1_000 },
    EdgeGuard: { calls: 400, items: 2_000 },
    AdmissionGate: { calls: 50, items: 50 },
    LimitsStore: { calls: 2, items: 2 },
  };

  it('counts production calls one per request each call carried, timers not at all', () => {
    const inputs = modelInputs(calls, 1_000, { GoodsStock: 50 });
    const of = (cls: string) => inputs.find((i) => i.cls === cls);
    expect(of('GoodsStock')).toEqual({ cls: 'GoodsStock', callsPerPurchase: 0.1, requestsPerPurchase: 1, cpuMsPerCall: 0.5 });
    expect(of('EdgeGuard')).toMatchObject({ callsPerPurchase: 0.4, requestsPerPurchase: 2, cpuMsPerCall: null });
    expect(of('AdmissionGate')).toMatchObject({ callsPerPurchase: 0.05, requestsPerPurchase: 0 });
    expect(of('LimitsStore')).toMatchObject({ callsPerPurchase: 0.002, requestsPerPurchase: 0 });
  });

  it('takes the lowest ceiling over the classes and names it', () => {
    const model = capacityModel(modelInputs(calls, 1_000), 1_000);
    const at = (shards: number) => model.scenarios.find((s) => s.shards === shards);
    // One shard: the stock object takes one call per purchase in production, ten per hundred as measured.
    expect(at(1)?.production).toEqual({ purchasesPerSec: 1_000, limitedBy: 'GoodsStock' });
    expect(at(1)?.measured).toEqual({ purchasesPerSec: 10_000, limitedBy: 'GoodsStock' });
    // More shards lift the stock ceiling; the 128 guard shards (two requests per purchase) stay above it.
    expect(at(16)?.production).toEqual({ purchasesPerSec: 16_000, limitedBy: 'GoodsStock' });
    expect(at(16)?.perObjectAtTarget).toMatchObject({ GoodsStock: 625, EdgeGuard: 156.3, AdmissionGate: 0 });
    expect(model.scenarios.map((s) => s.shards)).toEqual([1, 8, 16, 64]);
    expect(objectsPerGoods('WaitingRoom', 8)).toBe(32);
  });

  it('spreads each fixed-size class over as many objects as durable-objects/routing.ts and the kernel make', async () => {
    const source = (file: string) => readFile(new URL(`../../${file}`, import.meta.url), 'utf8');
    const routing = await source('durable-objects/routing.ts');
    const room = await source('workers/kernel/waiting-room.ts');
    const constant = (text: string, name: string) =>
      Number(new RegExp(`export const ${name} = ([\\d_]+);`).exec(text)?.[1]?.replaceAll('_', ''));
    expect(objectsPerGoods('EdgeGuard', 8)).toBe(constant(routing, 'GUARD_SHARDS'));
    // The isolates read the limits from the copies and flush metrics to one shard each.
    expect(objectsPerGoods('LimitsStore', 8)).toBe(constant(routing, 'LIMITS_REPLICAS'));
    expect(objectsPerGoods('Metrics', 8)).toBe(constant(routing, 'METRICS_SHARDS'));
    expect(objectsPerGoods('WaitingRoom', 8)).toBe(constant(room, 'ROOM_SHARDS'));
    expect(objectsPerGoods('AdmissionGate', 8)).toBe(1);
  });

  it('sums the methods of each class', () => {
    expect(byClass({ EdgeGuard: { a: { calls: 1, items: 3 }, b: { calls: 2, items: 2 } } })).toEqual({ EdgeGuard: { calls: 3, items: 5 } });
  });
});

describe('the group commit as counted', () => {
  it('reads how many purchases a stock call carried, and nothing when none was made', () => {
    expect(purchasesPerStockCall({ GoodsStock: { reserveMany: { calls: 4, items: 50 }, settle: { calls: 9, items: 9 } } })).toBe(12.5);
    expect(purchasesPerStockCall({ GoodsStock: { settle: { calls: 2, items: 2 } } })).toBeNull();
    expect(purchasesPerStockCall({})).toBeNull();
  });
});

describe('CPU by object class', () => {
  it('finds the module of a bundle line and the class of its folder', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'bench-model-'));
    try {
      const file = join(dir, 'index.js');
      await writeFile(
        file,
        [
          '// workers/http/app.ts',
          'a();',
          '// durable-objects/goods-stock/ledger.ts',
          'b();',
          '// durable-objects/waiting-room/hub.ts',
          'c();',
        ].join('\n'),
      );
      const moduleOf = await bundleModules(file);
      expect(moduleOf(1)).toBe('workers/http/app.ts');
      expect(moduleOf(3)).toBe('durable-objects/goods-stock/ledger.ts');
      expect(classOfFile(moduleOf(5))).toBe('WaitingRoom hub');
      expect(classOfFile('durable-objects/waiting-room/shard.ts')).toBe('WaitingRoom');
      expect(classOfFile('durable-objects/routing.ts')).toBeUndefined();

      // root -> app (line 1) -> ledger (line 3) -> a kernel helper (line 1 again, counted for the object above it)
      const frame = (id: number, lineNumber: number, children: number[] = []) => ({
        id,
        callFrame: { functionName: `f${id}`, url: 'file:///bundle/index.js', lineNumber },
        children,
      });
      const profile: CpuProfile = {
        nodes: [
          { id: 1, callFrame: { functionName: '(root)', url: '', lineNumber: -1 }, children: [2] },
          frame(2, 1, [3]),
          frame(3, 3, [4]),
          frame(4, 1),
        ],
        samples: [2, 3, 4, 4],
        timeDeltas: [0, 1_000, 2_000, 3_000],
      };
      // A sample lasts until the next one (the last one as long as the one before, as profile.ts counts).
      expect(cpuByClass(profile, moduleOf)).toEqual({ GoodsStock: 8 });
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe('the delay phase', () => {
  it('reads calls waited one after another from the extra latency, and never fewer than none', () => {
    expect(callsWaited(180, 80, 50)).toBe(2);
    expect(callsWaited(156, 119, 50)).toBe(0.74);
    // The undelayed phase queued longer at its p99 than the delayed one: noise, not calls.
    expect(callsWaited(366, 910, 50)).toBe(0);
  });
});
