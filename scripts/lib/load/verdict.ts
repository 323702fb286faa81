// The load test's verdict: the invariants of DESIGN.md, read back through the admin stats and
// checked against what the shoppers were told.
import { liveOrders, type StatsCheck, statsChecks } from './admin.ts';
import { read, type Stats } from './contract.ts';
import type { AcceptedPurchase, Idempotency, LoadResult } from './flow.ts';
import type { HttpClient } from './http-client.ts';
import { countWhere, type StepSummary } from './metrics.ts';
import { OUTSIDER_REFUSAL, outsidersLetThrough } from './outsiders.ts';

export type OrderCheck = { checked: number; missing: { requestId: string; orderId: string | null; status: number }[] };
export type Verdict = { ok: boolean; oversold: number; lost: number; duplicateHolders: number; checks: Omit<StatsCheck, 'oversold'>[] };

/** Answers a valid request may legitimately get under load; any other 5xx is a failure. */
const ALLOWED_5XX = new Set(['503 BUSY', '503 UNAVAILABLE']);

/**
 * Fetches every order a SUCCESS result names, as its owner; returns the ones that are missing
 * or wrong. `concurrency` requests at a time.
 */
export async function verifyOrders(
  http: HttpClient,
  goodsId: number,
  results: AcceptedPurchase[],
  jwts: Map<string, string>,
  concurrency: number,
): Promise<OrderCheck> {
  const successes = results.filter((r) => r.status === 'SUCCESS');
  const missing: OrderCheck['missing'] = [];
  let next = 0;
  async function worker() {
    while (next < successes.length) {
      const r = successes[next++];
      if (!r) {
        return;
      }
      const answer = r.orderId
        ? await http.get(`/api/orders/${r.orderId}`, { headers: { authorization: `Bearer ${jwts.get(r.requestId)}` } })
        : { status: 0, json: undefined };
      const order = read.order(answer.json);
      if (answer.status !== 200 || order?.goodsId !== goodsId || order?.userId !== r.userId) {
        missing.push({ requestId: r.requestId, orderId: r.orderId ?? null, status: answer.status });
      }
    }
  }
  await Promise.all(Array.from({ length: Math.max(1, Math.min(concurrency, successes.length)) }, worker));
  return { checked: successes.length, missing };
}

/** Every invariant of the run, from the stats at rest, what the shoppers were told and their orders. */
export function loadVerdict({
  stats,
  atRest,
  load,
  orders,
  createdGoods,
  quantity = 1,
  outsiderTokens,
}: {
  stats: Stats;
  atRest: boolean;
  load: LoadResult;
  orders: OrderCheck;
  createdGoods: boolean;
  /** Units each purchase asked for: a SUCCESS holds that many. */
  quantity?: number;
  /** The token step of the shoppers off an allowlist (--allowlist), each owed 403 NOT_ELIGIBLE. */
  outsiderTokens?: StepSummary | undefined;
}): Verdict {
  const checks = statsChecks(stats, atRest);
  const results = load.accepted;
  const unresolved = results.filter((r) => r.status === 'QUEUED').length;
  const successes = results.filter((r) => r.status === 'SUCCESS');
  const perUser = new Map<string, number>();
  for (const r of successes) {
    perUser.set(r.userId, (perUser.get(r.userId) ?? 0) + 1);
  }
  const duplicateHolders = [...perUser.values()].filter((n) => n > 1).length;
  const steps = load.steps;
  const validSteps = ['challenge', 'token', 'purchase', 'retry', 'result'] as const;
  const bad5xx = validSteps.reduce((n, s) => n + countWhere(steps[s].outcomes, (k) => k.startsWith('5') && !ALLOWED_5XX.has(k)), 0);
  const malformed = steps.malformed.outcomes;
  const malformedNot4xx = countWhere(malformed, (k) => !k.startsWith('4'));
  const hung = Object.values(steps).reduce((n, s) => n + countWhere(s.outcomes, (k) => k === '0 timeout'), 0);
  const live = liveOrders(stats);
  const soldUnits = successes.length * quantity;
  checks.push(
    {
      name: 'every 202 ends SUCCESS or FAIL',
      ok: unresolved === 0,
      detail: `${results.length} accepted, ${successes.length} SUCCESS, ${results.length - successes.length - unresolved} FAIL, ${unresolved} still QUEUED`,
    },
    {
      name: 'every SUCCESS has its order',
      ok: orders.missing.length === 0,
      detail: `${orders.checked} orders fetched, ${orders.missing.length} missing or wrong`,
    },
    {
      name: 'one order per shopper',
      ok: duplicateHolders === 0,
      detail: `${perUser.size} shoppers with an order, ${duplicateHolders} with more than one`,
    },
    { name: 'no 5xx but BUSY', ok: bad5xx === 0, detail: `${bad5xx} other 5xx answers` },
    {
      name: 'bad input refused with 4xx',
      ok: malformedNot4xx === 0,
      detail: `${steps.malformed.count} malformed requests, ${malformedNot4xx} not answered 4xx`,
    },
    { name: 'no request hung', ok: hung === 0, detail: `${hung} timed out` },
    {
      name: 'retries idempotent',
      ok: load.idempotency.mismatches === 0,
      detail: `${load.idempotency.retries} retried, ${load.idempotency.mismatches} answered differently${mismatchExamples(load.idempotency)}, ${load.idempotency.notCompared} not compared (not a decision, or turned away before the object)`,
    },
    {
      name: 'the sale was exercised',
      ok: steps.purchase.count > 0,
      detail: `${steps.purchase.count} purchases sent (none: the shoppers were stopped before buying; see the outcomes, lift a ban with POST /admin/limits/bans/lift)`,
    },
  );
  if (outsiderTokens) {
    const through = outsidersLetThrough(outsiderTokens.outcomes);
    checks.push({
      name: 'outsiders refused',
      ok: through === 0 && outsiderTokens.count > 0,
      detail: `${outsiderTokens.count} shoppers off the allowlist asked for a token, ${through} not answered ${OUTSIDER_REFUSAL}`,
    });
  }
  if (createdGoods) {
    // Only this run bought this goods: the orders it was told about are all the orders there are
    // (a few more when a purchase's answer was lost to a timeout).
    const lostAnswers =
      countWhere(steps.purchase.outcomes, (k) => k.startsWith('0')) + countWhere(steps.retry.outcomes, (k) => k.startsWith('0'));
    checks.push({
      name: 'orders match what shoppers were told',
      ok: live >= soldUnits && live - soldUnits <= lostAnswers * quantity,
      detail: `${live} units in live orders, ${successes.length} shoppers told SUCCESS for ${quantity} each`,
    });
  }
  const oversold = Math.max(0, live - stats.totalStock, soldUnits - stats.totalStock);
  const lost = unresolved + orders.missing.length + (createdGoods ? Math.max(0, Math.ceil((soldUnits - live) / quantity)) : 0);
  return { ok: checks.every((c) => c.ok), oversold, lost, duplicateHolders, checks: checks.map(({ oversold: _o, ...c }) => c) };
}

/** The first few retries answered differently, as "first then again". */
function mismatchExamples(idempotency: Idempotency): string {
  const shown = idempotency.examples.map((e) => `${e.first} then ${e.again}`);
  return shown.length > 0 ? ` (${shown.join('; ')})` : '';
}
