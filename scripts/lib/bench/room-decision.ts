import { decide, initialHubState, type Reported } from '../../../durable-objects/waiting-room/hub-rules.ts';
import { after, arrivalKey, exactKeysFor, reportKeys, timeHorizon } from '../../../durable-objects/waiting-room/rules.ts';
import type { RoomGoods } from '../../../workers/kernel/waiting-room.ts';

// The waiting room's coordinator decides once a tick over every shard's report: its cost grows
// with the shard count (the places of every sampled key are counted in every shard's report).
// Measured here on the coordinator's own rules in the bench's process (the same V8 as workerd's),
// for a line of 100,000 spread evenly, so the room's shard count has a price next to its capacity.

export type DecisionCost = { shards: number; waiting: number; reportKB: number; ms: number };

/** Median time of one decision over `shards` full reports of `waiting` shoppers at `admitPerSecond`. */
export function decisionCost(shards: number, waiting = 100_000, admitPerSecond = 500, runs = 5): DecisionCost {
  const goods: RoomGoods = {
    goodsId: 1,
    locationHint: null,
    startAt: 0,
    endAt: Number.MAX_SAFE_INTEGER,
    paused: false,
    mode: 'always',
    admitPerSecond,
    preQueueSeconds: 0,
    passSeconds: 120,
    shards,
  };
  const now = 10_000_000;
  const perShard = Math.ceil(waiting / shards);
  const reports: Reported[] = Array.from({ length: shards }, (_, shard) => {
    const keys = Array.from({ length: perShard }, (_, i) => arrivalKey(1_000 + i * shards + shard, `s${shard}t${i}`));
    const { keys: ladder, exact } = reportKeys(keys, exactKeysFor(goods));
    return {
      goods,
      shard,
      waiting: keys.length,
      unkeyed: 0,
      covered: 0,
      keys: ladder,
      exact,
      horizon: exact < keys.length ? after(keys[exact - 1] ?? '') : timeHorizon(now),
      outstanding: 0,
      arrivals: 0,
      joined: 0,
      admitted: 0,
      messages: 0,
      live: 0,
      round: 0,
      receivedAt: now,
    };
  });
  const stock = { remaining: waiting, queued: 0, confirmed: 0 };
  const times: number[] = [];
  // One run to warm the code up, then the runs that count.
  for (let i = 0; i <= runs; i++) {
    const started = performance.now();
    decide(initialHubState(goods, 0), reports, goods, stock, 0, now, 1_000);
    if (i > 0) {
      times.push(performance.now() - started);
    }
  }
  times.sort((a, b) => a - b);
  return {
    shards,
    waiting: perShard * shards,
    reportKB: Math.round(JSON.stringify(reports[0]).length / 102.4) / 10,
    ms: Math.round((times[Math.floor(times.length / 2)] ?? 0) * 10) / 10,
  };
}
