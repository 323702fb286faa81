// The load test's report: a human-readable summary, and the JSON document behind it.
import type { Stats } from './contract.ts';
import type { LoadResult, Progress, StepName } from './flow.ts';
import { countWhere, fmt, formatOutcomes, round, table } from './metrics.ts';
import type { LoadOptions } from './options.ts';
import type { Verdict } from './verdict.ts';

/** The goods a run bought: made for it, or one that was there. */
export type RunGoods = { goodsId: number; created: boolean; stock: number };
export type LoadReport = ReturnType<typeof loadReport>;

const STEP_NAMES: Record<StepName, string> = {
  challenge: 'challenge',
  token: 'token',
  purchase: 'purchase',
  retry: 'purchase retry',
  result: 'result read',
  malformed: 'malformed',
};

/** The JSON report (what --json prints). */
export function loadReport({
  options,
  goods,
  shoppers,
  load,
  stats,
  verdict,
  staleRetries = 0,
}: {
  options: LoadOptions;
  goods: RunGoods;
  shoppers: number;
  load: LoadResult;
  stats: Stats;
  verdict: Verdict;
  staleRetries?: number;
}) {
  const seconds = load.loadMs / 1000;
  const purchases = load.steps.purchase;
  const accepted = load.accepted.length;
  return {
    tool: 'edge-seckill loadtest',
    version: 1,
    startedAt: load.startedAt,
    url: options.url,
    options: {
      users: shoppers,
      concurrency: options.concurrency,
      durationS: options.durationS ?? null,
      requests: options.requests ?? null,
      duplicates: options.duplicates,
      retries: options.retries,
      malformed: options.malformed,
      quantity: options.quantity,
      allowlist: options.allowlist,
      lookahead: options.lookahead,
      resultWaitS: options.resultWaitS,
      pollIntervalMs: options.pollIntervalMs,
      raiseLimits: options.raiseLimits,
      jwtSource: options.jwtFile ? 'file' : 'dev-token',
    },
    goods,
    durationS: round(seconds, 2),
    firstWaveMs: load.preparedFirstWaveMs,
    throughput: {
      requests: load.requests,
      requestsPerSec: round(load.requests / Math.max(seconds, 0.001)),
      attempts: load.attempts,
      attemptsPerSec: round(load.attempts / Math.max(seconds, 0.001)),
      purchasesPerSec: round(purchases.count / Math.max(seconds, 0.001)),
    },
    steps: load.steps,
    malformedByKind: load.malformedByKind,
    outcomes: {
      accepted,
      /**
       * Result reads per accepted purchase, until final or the settle deadline: about 1 when each
       * read is held for the final answer (the Redis mirror answers QUEUED at once, so more there).
       */
      resultReadsPerAccepted: accepted > 0 ? round(load.steps.result.count / accepted, 2) : null,
      success: load.accepted.filter((r) => r.status === 'SUCCESS').length,
      fail: load.accepted.filter((r) => r.status === 'FAIL').length,
      unresolved: load.accepted.filter((r) => r.status === 'QUEUED').length,
      soldOut: countWhere(purchases.outcomes, (k) => k === '410 SOLD_OUT'),
      alreadyPurchased: countWhere(purchases.outcomes, (k) => k === '409 ALREADY_PURCHASED'),
      busy: countWhere(purchases.outcomes, (k) => k.startsWith('503')),
      rateLimited: countWhere(purchases.outcomes, (k) => k.startsWith('429')),
    },
    idempotency: load.idempotency,
    /** Requests re-sent on a new connection because the server had closed the kept-alive one. */
    staleConnectionRetries: staleRetries,
    stats,
    invariants: verdict,
  };
}

/** The report as text. */
export function formatLoadReport(r: LoadReport): string {
  const lines: string[] = [];
  lines.push(`Load test of ${r.url}, goods ${r.goods.goodsId}${r.goods.created ? ` (created, ${fmt(r.goods.stock)} units)` : ''}`);
  lines.push(
    `${fmt(r.options.users)} shoppers, concurrency ${r.options.concurrency}, duplicates ${r.options.duplicates}, retries ${r.options.retries}, malformed ${r.options.malformed}`,
  );
  lines.push(
    `Ran ${fmt(r.durationS, 1)} s after a first wave of ${fmt(r.options.lookahead)} shoppers prepared in ${fmt(r.firstWaveMs)} ms: ` +
      `${fmt(r.throughput.requests)} requests (${fmt(r.throughput.requestsPerSec)}/s), ` +
      `${fmt(r.throughput.attempts)} purchase attempts (${fmt(r.throughput.attemptsPerSec)}/s)`,
  );
  lines.push('');
  const rows = [['step', 'count', 'p50 ms', 'p90 ms', 'p99 ms', 'max ms', 'outcomes']];
  for (const [key, name] of Object.entries(STEP_NAMES) as [StepName, string][]) {
    const s = r.steps[key];
    if (s.count > 0) {
      rows.push([name, fmt(s.count), fmt(s.p50Ms, 1), fmt(s.p90Ms, 1), fmt(s.p99Ms, 1), fmt(s.maxMs, 1), formatOutcomes(s.outcomes)]);
    }
  }
  lines.push(table(rows));
  lines.push('');
  const o = r.outcomes;
  lines.push(
    `Accepted ${fmt(o.accepted)} (SUCCESS ${fmt(o.success)}, FAIL ${fmt(o.fail)}, unresolved ${fmt(o.unresolved)}); ` +
      `sold out ${fmt(o.soldOut)}, already purchased ${fmt(o.alreadyPurchased)}, busy ${fmt(o.busy)}, rate limited ${fmt(o.rateLimited)}`,
  );
  if (o.resultReadsPerAccepted !== null) {
    const held = r.options.resultWaitS > 0 ? `held up to ${r.options.resultWaitS} s each` : 'answered at once';
    lines.push(
      `Result reads: ${fmt(o.resultReadsPerAccepted, 2)} per accepted purchase (${held}, started at least ${fmt(r.options.pollIntervalMs)} ms apart)`,
    );
  }
  const s = r.stats;
  if (s) {
    lines.push(
      `Stats: total ${fmt(s.totalStock)}, object ${fmt(s.doRemaining)}, Postgres ${fmt(s.dbStock)}, mirror ${s.mirror === 'ok' ? fmt(s.mirrorStock) : s.mirror}, ` +
        `orders ${Object.entries(s.orders)
          .filter(([, n]) => n > 0)
          .map(([k, n]) => `${k} ${fmt(n)}`)
          .join(', ')}`,
    );
  }
  lines.push('');
  lines.push(`Invariants: ${r.invariants.ok ? 'HOLD' : 'VIOLATED'} (oversold ${r.invariants.oversold}, lost ${r.invariants.lost})`);
  for (const c of r.invariants.checks) {
    lines.push(`  ${c.ok ? 'ok  ' : 'FAIL'}  ${c.name}: ${c.detail}`);
  }
  return lines.join('\n');
}

/** One progress line for stderr. */
export function progressLine(p: Progress, previous: Progress | undefined): string {
  const rate = previous ? (p.requests - previous.requests) / Math.max(0.001, p.elapsedS - previous.elapsedS) : 0;
  const pur = p.purchases;
  const accepted = pur['202'] ?? 0;
  const soldOut = pur['410 SOLD_OUT'] ?? 0;
  const already = pur['409 ALREADY_PURCHASED'] ?? 0;
  const other = Object.values(pur).reduce((a, b) => a + b, 0) - accepted - soldOut - already;
  return (
    `[${p.elapsedS.toFixed(0).padStart(4)} s] ${fmt(rate).padStart(6)} req/s  attempts ${fmt(p.attempts)}  ` +
    `202 ${fmt(accepted)}  410 ${fmt(soldOut)}  409 ${fmt(already)}  other ${fmt(other)}  ` +
    `in flight ${p.inFlight}  ready ${p.ready}  awaiting result ${fmt(p.unresolved)}`
  );
}
