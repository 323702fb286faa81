import { describe, expect, it } from 'vitest';
import { CALLS_PER_ROUND, planRound } from '../../workers/edge/guard-reports';
import type { KeyReport } from '../../workers/kernel/contract';

// A busy isolate has keys on every guard shard; a report round calls at most CALLS_PER_ROUND of
// them, the busiest first, and no shard's keys wait for ever.

const key = (id: string, hits: number, extra: Partial<KeyReport> = {}): KeyReport => ({ id, hits, windows: [], ...extra });
/** Keys named `s<shard>:<n>` belong to shard `s<shard>`. */
const shardOf = (id: string) => id.split(':')[0] ?? id;

describe('report rounds', () => {
  it('send the busiest shards first, at most CALLS_PER_ROUND a round, and keep the rest for later rounds', () => {
    const waiting = new Map<string, { keys: KeyReport[]; rounds: number }>();
    const keys = Array.from({ length: 40 }, (_, i) => key(`s${i}:a`, i));
    const first = planRound(waiting, keys, shardOf, CALLS_PER_ROUND);
    expect(first).toHaveLength(CALLS_PER_ROUND);
    expect(first.map(([shard]) => shard)).toEqual(Array.from({ length: CALLS_PER_ROUND }, (_, i) => `s${39 - i}`));
    expect(waiting.size).toBe(40 - CALLS_PER_ROUND);
    // Counts that arrive meanwhile join their shard's waiting batch.
    const second = planRound(waiting, [key('s0:b', 1)], shardOf, CALLS_PER_ROUND);
    expect(second).toHaveLength(CALLS_PER_ROUND);
    let rounds = 2;
    let sent = first.length + second.length;
    let s0: KeyReport[] | undefined;
    while (waiting.size > 0) {
      const round = planRound(waiting, [], shardOf, CALLS_PER_ROUND);
      s0 ??= round.find(([shard]) => shard === 's0')?.[1];
      sent += round.length;
      rounds++;
    }
    expect(sent).toBe(40);
    expect(rounds).toBe(3);
    expect(s0?.map((k) => k.id)).toEqual(['s0:a', 's0:b']);
  });

  it('put bans and ban checks ahead of any count, and a shard that waited long ahead of busier ones', () => {
    const waiting = new Map<string, { keys: KeyReport[]; rounds: number }>();
    const busy = (round: number) => Array.from({ length: 20 }, (_, i) => key(`b${i}:${round}`, 1000));
    planRound(waiting, [key('quiet:x', 1)], shardOf, 0);
    const withBan = planRound(
      waiting,
      [...busy(0), key('banned:y', 0, { bannedUntil: 1 }), key('check:z', 0, { check: true })],
      shardOf,
      2,
    );
    expect(withBan.map(([shard]) => shard).sort()).toEqual(['banned', 'check']);
    // The quiet shard waits behind busier ones, but not for more than a few rounds.
    let round = 1;
    let quietAt: number | undefined;
    while (quietAt === undefined && round < 20) {
      const sent = planRound(waiting, busy(round), shardOf, CALLS_PER_ROUND);
      if (sent.some(([shard]) => shard === 'quiet')) {
        quietAt = round;
      }
      round++;
    }
    expect(quietAt).toBeDefined();
    expect(quietAt).toBeLessThanOrEqual(8);
  });
});
