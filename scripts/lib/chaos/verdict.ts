// The chaos run's verdict, pure: per phase, what the shoppers were told (tally.ts) against the
// end state (collect.ts), as one table row (accepted, orders, failed, stuck, oversold, lost,
// duplicates, 5xx) and the invariants of DESIGN.md as named checks. Any check that fails makes
// the run fail.

import { FALLBACK_POLL_MS } from '../../../web/src/shopper/waiting-line.ts';
import type { GoodsFacts } from './collect.ts';
import type { TallySummary } from './tally.ts';

const LIVE = new Set([0, 1]);

export type PhaseInput = {
  key: string;
  title: string;
  stock: number;
  /** Honest shoppers who came to buy; more than the stock means the sale must sell out. */
  demand: number;
  tally: TallySummary;
  facts: GoodsFacts;
  /** When this goods came to rest (epoch ms), or undefined when it never did. */
  restAt: number | undefined;
  /** Whether the phase's fault took effect (faultEvidence), when the run can tell. */
  evidence?: { ok: boolean; detail: string } | undefined;
  /** Stock shards the goods was made with (`--shards`); more than one is checked in its stats. */
  shards?: number | undefined;
  /** The phase's fault (plan.ts), and its waiting room, if it had one: its shoppers' waits are checked too. */
  fault?: string | undefined;
  queue?: { admitPerSecond: number; shards: number } | undefined;
  /** False when the run went without the Redis mirror: nothing in Redis to check. */
  mirror?: boolean | undefined;
};

/**
 * The Worker's own lines that show a fault made in the Worker reached the code it breaks: a
 * switch that missed (an isolate of its own, a hook lost in a merge) must not pass for a
 * fault survived. Faults made from outside (Postgres, Redis) are seen to happen by the run.
 */
const EVIDENCE: Record<string, string> = {
  'queue-send-fails': 'goods_stock.outbox_send_failed',
  'duplicate-deliveries': 'dev_fault.delivered_twice',
  'consumer-fails': 'orders.group_failed',
};

/** Whether a phase's fault took effect, from what the Worker logged during it and the resets it answered. */
export function faultEvidence(
  fault: string,
  workerEvents: Record<string, number>,
  resets: { asked: number; done: number; met?: number },
): { ok: boolean; detail: string } | undefined {
  if (fault === 'edge-reset') {
    // Each reset asks every guard shard, limits object and metrics shard and the goods' gate; the
    // sale's own calls (a report, a read, a renewal, a flush) must have met some of them, or the
    // phase tested new instances only, never a call failing under the sale.
    const met = resets.met ?? 0;
    return {
      ok: resets.done > 0 && met > 0,
      detail: `${resets.done} of ${resets.asked} resets taken by every object they asked; the sale's own calls met ${met} objects' resets first`,
    };
  }
  if (fault === 'object-reset' || fault === 'room-reset') {
    return { ok: resets.done > 0, detail: `${resets.done} of ${resets.asked} resets met an object with state to lose` };
  }
  const event = EVIDENCE[fault];
  if (!event) {
    return undefined;
  }
  const seen = workerEvents[event] ?? 0;
  return { ok: seen > 0, detail: `${event} logged ${seen} times during the phase` };
}

export type Row = {
  key: string;
  title: string;
  accepted: number;
  orders: number;
  failed: number;
  stuck: number;
  oversold: number;
  lost: number;
  duplicates: number;
  fiveXX: number;
  busy: number;
};

export type Check = { phase: string; name: string; ok: boolean; detail: string };
export type PhaseVerdict = { row: Row; checks: Check[]; notes: string[] };

/** The numbers and checks of one phase. */
export function judgePhase(p: PhaseInput): PhaseVerdict {
  const { tally, facts } = p;
  const s = facts.stats;
  const byRequest = new Map<string, GoodsFacts['orders']>();
  for (const o of facts.orders) {
    byRequest.set(o.requestId, [...(byRequest.get(o.requestId) ?? []), o]);
  }
  const live = facts.orders.filter((o) => LIVE.has(o.status));
  const liveByUser = new Map<string, number>();
  for (const o of live) {
    liveByUser.set(o.userId, (liveByUser.get(o.userId) ?? 0) + 1);
  }
  const failed = tally.accepted.filter((a) => a.status === 'FAIL').length;
  const stuck = tally.accepted.filter((a) => a.status === 'QUEUED' || a.status === 'UNKNOWN').length;
  const lost = tally.accepted.filter((a) => a.status !== 'FAIL' && !byRequest.has(a.requestId)).length;
  const holdingTwo = [...liveByUser.values()].filter((n) => n > 1).length;
  const twoForOne = [...byRequest.values()].filter((rows) => rows.length > 1).length;
  const wrongOrder = tally.accepted.filter(
    (a) =>
      a.status === 'SUCCESS' && a.orderId !== undefined && byRequest.has(a.requestId) && byRequest.get(a.requestId)?.[0]?.id !== a.orderId,
  ).length;
  const remaining = s?.doRemaining ?? null;
  const oversold = Math.max(0, live.length - p.stock) + Math.max(0, -(remaining ?? 0));
  const row: Row = {
    key: p.key,
    title: p.title,
    accepted: tally.accepted.length,
    orders: facts.orders.length,
    failed,
    stuck,
    oversold,
    lost,
    duplicates: holdingTwo + twoForOne + wrongOrder,
    fiveXX: tally.fiveXX,
    busy: tally.busy,
  };
  const check = (name: string, ok: boolean, detail: string): Check => ({ phase: p.key, name, ok, detail });
  const checks: Check[] = [
    ...(p.evidence ? [check('the fault took effect', p.evidence.ok, p.evidence.detail)] : []),
    check('every 202 ended SUCCESS or FAIL', stuck === 0, `${stuck} of ${row.accepted} still QUEUED or unreadable`),
    check('nothing lost', lost === 0, `${lost} accepted with neither an order nor a FAIL`),
    check('no oversell', oversold === 0, `${live.length} live orders for ${p.stock} units, object remaining ${remaining}`),
    check(
      'no duplicates',
      row.duplicates === 0,
      `${holdingTwo} shoppers with two live orders, ${twoForOne} requests with two orders, ${wrongOrder} results naming another order`,
    ),
    check('no 5xx', tally.fiveXX === 0, tally.fiveXX === 0 ? `0 of ${tally.requests}` : tally.fiveXXExamples.join(' | ')),
    check(
      'every request answered',
      tally.noAnswer === 0,
      `${tally.noAnswer} without an answer (timeout or connection lost)${tally.noAnswerExamples.length ? `: ${tally.noAnswerExamples.join(' | ')}` : ''}`,
    ),
    check(
      'hostile requests refused',
      tally.hostile.letThrough === 0,
      `${tally.hostile.refused} of ${tally.hostile.sent} refused with a 4xx; let through: ${tally.hostile.examples.join(', ') || 'none'}`,
    ),
    check(
      'a retry with the same key gets the same answer',
      tally.idempotency.mismatches === 0,
      `${tally.idempotency.mismatches} of ${tally.idempotency.compared} differed${tally.idempotency.examples.length ? `: ${tally.idempotency.examples.join(', ')}` : ''}`,
    ),
    // Nothing a shopper asks for waits on Postgres: not the goods list, the ticket (its goods is
    // activity-scoped, its rule answered from the edge's copy), the purchase or the result.
    ...(p.fault === 'postgres-stopped' || p.fault === 'postgres-frozen'
      ? [
          check(
            'the sale answered through the outage',
            tally.busy === 0,
            `${tally.busy} of ${tally.requests} answered 503 BUSY/UNAVAILABLE`,
          ),
        ]
      : []),
    ...stockChecks(p, live.length),
    ...lineChecks(p),
    ...(p.mirror === false ? [] : mirrorChecks(p, live)),
    check(
      'the cron reconciled it at rest, consistent',
      facts.reconciliation !== undefined &&
        p.restAt !== undefined &&
        facts.reconciliation.runAt >= p.restAt &&
        facts.reconciliation.consistent,
      facts.reconciliation
        ? `last run ${p.restAt === undefined ? 'while it never came to rest' : `${Math.round((facts.reconciliation.runAt - p.restAt) / 1000)} s after it came to rest`}: ${facts.reconciliation.consistent ? 'consistent' : facts.reconciliation.kinds.join(', ')}`
        : 'no reconciliation of this goods',
    ),
  ];
  const accepted = new Set(tally.accepted.map((a) => a.requestId));
  const unanswered = facts.orders.filter((o) => !accepted.has(o.requestId)).length;
  const notes = [
    `${tally.requests} requests, ${tally.busy} answered 503 BUSY/UNAVAILABLE (retried)`,
    ...(unanswered > 0 ? [`${unanswered} orders whose 202 no shopper saw (answer lost to the fault, then retried into 409)`] : []),
    ...(facts.deadLetters.total > 0 ? [`${facts.deadLetters.total} dead letters stored, ${facts.deadLetters.open} not re-driven`] : []),
    ...(p.queue ? [describeLine(tally.line)] : []),
  ];
  return { row, checks, notes };
}

function stockChecks(p: PhaseInput, live: number): Check[] {
  const s = p.facts.stats;
  const check = (name: string, ok: boolean, detail: string): Check => ({ phase: p.key, name, ok, detail });
  if (!s) {
    return [check('stats readable', false, 'GET /admin/goods/:id/stats did not answer')];
  }
  const remaining = s.doRemaining;
  const held = s.queue?.outstanding ?? 0;
  const shards = p.shards ?? 1;
  const listed = 'shards' in s && Array.isArray(s.shards) ? s.shards.length : 1;
  return [
    // A sharded run whose goods came out with one shard would pass for one that tested the shards.
    ...(shards > 1 ? [check('its stock over its shards', listed === shards, `${listed} shards in the stats, ${shards} asked for`)] : []),
    check('at rest', s.queued === 0 && s.outboxPending === 0, `queued ${s.queued}, outbox ${s.outboxPending}`),
    check(
      'stock adds up',
      remaining !== null && remaining + live === s.totalStock,
      `object ${remaining} + live ${live} vs total ${s.totalStock}`,
    ),
    check('Postgres agrees', s.dbStock === remaining, `dbStock ${s.dbStock}, object ${remaining}`),
    // Behind a waiting room a unit may still be held for a shopper it let in who has not bought
    // (a stolen token's victim, say) until that shopper's pass and token lapse.
    check(
      'every unit sold (demand exceeded stock)',
      p.demand <= p.stock || remaining === 0 || (remaining !== null && remaining <= held),
      `${p.demand} shoppers for ${p.stock} units; ${remaining} left${held > 0 ? `, ${held} shoppers let in by the waiting room may still buy` : ''}`,
    ),
  ];
}

/** How a phase's shoppers waited in its line, in one line of text. */
export function describeLine(l: TallySummary['line']): string {
  return (
    `the line: ${l.joinedLive + l.joinedPost} joined (${l.joinedPost} with POST after the live join failed), ` +
    `${l.opened} live channels opened, ${l.dropped} dropped under a waiting shopper, ${l.reopened} opened again ` +
    `(the longest without one ${(l.longestDownMs / 1000).toFixed(1)} s); ` +
    `${l.heardLive} heard the end of their wait on the channel, ${l.heardPolled} from a poll or their POST join, ${l.gaveUp} gave up`
  );
}

/**
 * A phase with a waiting room: every shopper who joined its line heard how the wait ended (let
 * in, sold out, lapsed), on the live channel or from a poll while it was down; and where the
 * room's objects were reset, the resets dropped live channels and the page opened them again.
 */
function lineChecks(p: PhaseInput): Check[] {
  if (!p.queue) {
    return [];
  }
  const l = p.tally.line;
  const check = (name: string, ok: boolean, detail: string): Check => ({ phase: p.key, name, ok, detail });
  const joined = l.joinedLive + l.joinedPost;
  const checks = [
    check(
      'every shopper in line heard how their wait ended',
      joined > 0 && l.gaveUp === 0,
      `${l.joinedLive} joined as the live channel opened, ${l.joinedPost} with POST; ${l.heardLive} heard the end on the channel, ${l.heardPolled} from a poll while it was down, ${l.gaveUp} gave up`,
    ),
  ];
  if (p.fault === 'room-reset') {
    // Resets that dropped no channel tested no reconnect; a shopper left without its channel
    // until the fallback poll told them the end means the page did not open it again.
    checks.push(
      check(
        'live channels the resets dropped opened again',
        l.dropped > 0 && l.reopened > 0 && l.longestDownMs < FALLBACK_POLL_MS,
        `${l.dropped} channels dropped under a waiting shopper, ${l.reopened} opened again; the longest without one ${(l.longestDownMs / 1000).toFixed(1)} s (the page polls after ${FALLBACK_POLL_MS / 1000} s)`,
      ),
    );
  }
  return checks;
}

/** The Redis mirror at rest: the stock and holders as the object and Postgres say, and the seed's value types. */
function mirrorChecks(p: PhaseInput, live: GoodsFacts['orders']): Check[] {
  const { redis, stats } = p.facts;
  const check = (name: string, ok: boolean, detail: string): Check => ({ phase: p.key, name, ok, detail });
  if (!redis) {
    return [check('Redis readable', false, 'redis-server did not answer at the end')];
  }
  const remaining = stats?.doRemaining ?? null;
  const holders = new Set(live.map((o) => o.userId));
  const sameHolders = redis.users.length === holders.size && redis.users.every((u) => holders.has(u));
  const results = Object.entries(redis.results);
  const wrongType = results.filter(([, r]) => r.type !== 'string' && r.type !== 'none');
  const missing = results.filter(([, r]) => r.type === 'none').length;
  const finals = new Map(p.tally.accepted.map((a) => [a.requestId, a]));
  const wrongValue = results.filter(([id, r]) => {
    const a = finals.get(id);
    if (r.value === null || !a || a.status === 'UNKNOWN') {
      return false;
    }
    return a.status === 'SUCCESS'
      ? r.value !== `SUCCESS:${a.orderId}`
      : a.status === 'FAIL'
        ? !r.value.startsWith('FAIL:')
        : r.value !== 'QUEUED';
  }).length;
  return [
    check(
      'mirror agrees (stock, holders)',
      redis.stock === String(remaining) && sameHolders,
      `seckill:stock ${redis.stock ?? '(absent)'} vs object ${remaining}; seckill:users ${redis.users.length} vs ${holders.size} live holders${sameHolders ? '' : ' (different)'}`,
    ),
    check(
      "result keys keep the seed's type and value",
      wrongType.length === 0 && wrongValue === 0,
      `${results.length - missing} of ${results.length} present; ${wrongType.length} not a string${wrongType[0] ? ` (${wrongType[0][1].type})` : ''}; ${wrongValue} with another answer`,
    ),
  ];
}

const COLUMNS: [keyof Row, string][] = [
  ['accepted', 'accepted'],
  ['orders', 'orders'],
  ['failed', 'failed'],
  ['stuck', 'stuck'],
  ['oversold', 'oversold'],
  ['lost', 'lost'],
  ['duplicates', 'duplicates'],
  ['fiveXX', '5xx'],
  ['busy', '503 busy'],
];

/** The table, the checks that failed, and the verdict line. */
export function formatVerdict(verdicts: PhaseVerdict[], header: string[] = []): string {
  const titleWidth = Math.max(5, ...verdicts.map((v) => v.row.key.length + 1 + v.row.title.length));
  const head = `${'fault'.padEnd(titleWidth)}  ${COLUMNS.map(([, h]) => h.padStart(Math.max(5, h.length))).join('  ')}`;
  const lines = verdicts.map(
    (v) =>
      `${`${v.row.key} ${v.row.title}`.padEnd(titleWidth)}  ${COLUMNS.map(([k, h]) => String(v.row[k]).padStart(Math.max(5, h.length))).join('  ')}`,
  );
  const out = [...header, head, '-'.repeat(head.length), ...lines, ''];
  for (const v of verdicts) {
    const failed = v.checks.filter((c) => !c.ok);
    out.push(
      `${v.row.key} ${v.row.title}: ${v.checks.length - failed.length} of ${v.checks.length} invariants hold; ${v.notes.join('; ')}`,
    );
    for (const c of failed) {
      out.push(`    FAILED  ${c.name}: ${c.detail}`);
    }
  }
  const broken = verdicts.flatMap((v) => v.checks.filter((c) => !c.ok));
  out.push('', broken.length === 0 ? 'chaos: every invariant held' : `chaos: ${broken.length} invariant checks failed`);
  return out.join('\n');
}

/** 0 when every check of every phase holds, 1 otherwise. */
export function exitCode(verdicts: PhaseVerdict[]): 0 | 1 {
  return verdicts.every((v) => v.checks.every((c) => c.ok)) ? 0 : 1;
}
