// Latency and outcome bookkeeping shared by the load test and the bench.

/** Nearest-rank percentiles; all null when nothing was recorded. */
export type Percentiles = { p50Ms: number | null; p90Ms: number | null; p99Ms: number | null; maxMs: number | null; meanMs: number | null };
/** Outcome counts, e.g. `{ "202": 120, "410 SOLD_OUT": 3000 }`. */
export type Counts = Record<string, number>;
export type StepSummary = Percentiles & { count: number; outcomes: Counts };
export type Recorder = ReturnType<typeof recorder>;

/** Collects latencies (ms) and outcome counts for one kind of request. */
export function recorder() {
  let values = new Float64Array(1024);
  let n = 0;
  const outcomes: Counts = {};
  return {
    /** `outcome` e.g. "202" or "410 SOLD_OUT". */
    record(ms: number, outcome: string): void {
      if (n === values.length) {
        const bigger = new Float64Array(values.length * 2);
        bigger.set(values);
        values = bigger;
      }
      values[n++] = ms;
      outcomes[outcome] = (outcomes[outcome] ?? 0) + 1;
    },
    get count() {
      return n;
    },
    outcomes,
    /** p50/p90/p99/max of everything recorded so far. */
    summary(): StepSummary {
      return { count: n, ...percentiles(values.subarray(0, n)), outcomes: { ...outcomes } };
    },
  };
}

/** Nearest-rank percentiles of a list of latencies, rounded to 0.1 ms. */
export function percentiles(list: ArrayLike<number>): Percentiles {
  if (list.length === 0) {
    return { p50Ms: null, p90Ms: null, p99Ms: null, maxMs: null, meanMs: null };
  }
  const sorted = Float64Array.from(list).sort();
  const at = (p: number) => round(sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))] ?? 0);
  let sum = 0;
  for (const v of sorted) {
    sum += v;
  }
  return { p50Ms: at(50), p90Ms: at(90), p99Ms: at(99), maxMs: round(sorted[sorted.length - 1] ?? 0), meanMs: round(sum / sorted.length) };
}

/** `x` rounded to `digits` decimals. */
export function round(x: number, digits = 1): number {
  const f = 10 ** digits;
  return Math.round(x * f) / f;
}

/** Adds the counts of `b` into `a` (both `{ key: count }`). */
export function addCounts(a: Counts, b: Counts): Counts {
  for (const [k, v] of Object.entries(b)) {
    a[k] = (a[k] ?? 0) + v;
  }
  return a;
}

/** Sum of counts whose key starts with one of the status prefixes ("5", "202", ...). */
export function countWhere(counts: Counts, predicate: (key: string) => boolean): number {
  let n = 0;
  for (const [k, v] of Object.entries(counts)) {
    if (predicate(k)) {
      n += v;
    }
  }
  return n;
}

/** Renders rows as an aligned text table (first row is the header). */
export function table(rows: (string | number)[][]): string {
  const widths: number[] = [];
  for (const row of rows) {
    row.forEach((cell, i) => {
      widths[i] = Math.max(widths[i] ?? 0, String(cell).length);
    });
  }
  const line = (row: (string | number)[]) =>
    row
      .map((cell, i) => {
        const s = String(cell);
        return i === 0 ? s.padEnd(widths[i] ?? 0) : s.padStart(widths[i] ?? 0);
      })
      .join('  ');
  const [head = [], ...body] = rows;
  return [line(head), widths.map((w) => '-'.repeat(w)).join('  '), ...body.map(line)].join('\n');
}

/** "1,234" */
export function fmt(n: number | null | undefined, digits = 0): string {
  if (n === null || n === undefined || Number.isNaN(n)) {
    return '-';
  }
  return n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: 0 });
}

/** Outcome counts as "202:120 410 SOLD_OUT:3,000". */
export function formatOutcomes(outcomes: Counts): string {
  return Object.entries(outcomes)
    .sort((a, b) => b[1] - a[1])
    .map(([k, v]) => `${k}:${fmt(v)}`)
    .join('  ');
}
