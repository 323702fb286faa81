// The load test's verdict: the invariants of DESIGN.md, read back through the admin stats and
// checked against what the shoppers were told.
import { liveOrders, statsChecks } from './admin.mjs';
import { countWhere } from './metrics.mjs';

/** Answers a valid request may legitimately get under load; any other 5xx is a failure. */
const ALLOWED_5XX = new Set(['503 BUSY', '503 UNAVAILABLE']);

/**
 * Fetches every order a SUCCESS result names, as its owner; returns the ones that are missing
 * or wrong. `concurrency` requests at a time.
 */
export async function verifyOrders(http, goodsId, results, jwts, concurrency) {
  const successes = results.filter((r) => r.status === 'SUCCESS');
  const missing = [];
  let next = 0;
  async function worker() {
    while (next < successes.length) {
      const r = successes[next++];
      const answer = r.orderId
        ? await http.get(`/api/orders/${r.orderId}`, { headers: { authorization: `Bearer ${jwts.get(r.requestId)}` } })
        : { status: 0 };
      const order = answer.json;
      if (answer.status !== 200 || order?.goodsId !== goodsId || order?.userId !== r.userId) {
        missing.push({ requestId: r.requestId, orderId: r.orderId ?? null, status: answer.status });
      }
    }
  }
  await Promise.all(Array.from({ length: Math.max(1, Math.min(concurrency, successes.length)) }, worker));
  return { checked: successes.length, missing };
}

/**
 * @param {{ stats: Record<string, unknown>, atRest: boolean, load: Record<string, unknown>, orders: { checked: number, missing: unknown[] }, createdGoods: boolean }} input
 */
export function loadVerdict({ stats, atRest, load, orders, createdGoods }) {
  const checks = statsChecks(stats, atRest);
  const results = load.accepted;
  const unresolved = results.filter((r) => r.status === 'QUEUED').length;
  const successes = results.filter((r) => r.status === 'SUCCESS');
  const perUser = new Map();
  for (const r of successes) {
    perUser.set(r.userId, (perUser.get(r.userId) ?? 0) + 1);
  }
  const duplicateHolders = [...perUser.values()].filter((n) => n > 1).length;
  const steps = load.steps;
  const validSteps = ['challenge', 'token', 'purchase', 'retry', 'result'];
  const bad5xx = validSteps.reduce((n, s) => n + countWhere(steps[s].outcomes, (k) => k.startsWith('5') && !ALLOWED_5XX.has(k)), 0);
  const malformed = steps.malformed.outcomes;
  const malformedNot4xx = countWhere(malformed, (k) => !k.startsWith('4'));
  const hung = Object.values(steps).reduce((n, s) => n + countWhere(s.outcomes, (k) => k === '0 timeout'), 0);
  const live = liveOrders(stats);
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
      detail: `${load.idempotency.retries} retried, ${load.idempotency.mismatches} answered differently, ${load.idempotency.notCompared} refused at the edge (not compared)`,
    },
    {
      name: 'the sale was exercised',
      ok: steps.purchase.count > 0,
      detail: `${steps.purchase.count} purchases sent (none: the shoppers were stopped before buying; see the outcomes, lift a ban with POST /admin/limits/bans/lift)`,
    },
  );
  if (createdGoods) {
    // Only this run bought this goods: the orders it was told about are all the orders there are
    // (a few more when a purchase's answer was lost to a timeout).
    const lostAnswers =
      countWhere(steps.purchase.outcomes, (k) => k.startsWith('0')) + countWhere(steps.retry.outcomes, (k) => k.startsWith('0'));
    checks.push({
      name: 'orders match what shoppers were told',
      ok: live >= successes.length && live - successes.length <= lostAnswers,
      detail: `${live} live orders, ${successes.length} shoppers told SUCCESS`,
    });
  }
  const oversold = Math.max(0, live - stats.totalStock, successes.length - stats.totalStock);
  const lost = unresolved + orders.missing.length + (createdGoods ? Math.max(0, successes.length - live) : 0);
  return { ok: checks.every((c) => c.ok), oversold, lost, duplicateHolders, checks: checks.map(({ oversold: _o, ...c }) => c) };
}
