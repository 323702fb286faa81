import { type CounterLabels, type CounterName, HISTOGRAMS, type HistogramLabels, type HistogramName } from './catalog';

// Per-isolate accumulation of counters and histograms. Nothing here is durable: deltas are
// taken and shipped to this isolate's Metrics shard (flush.ts); a scrape sums the shards.

export type Labels = Record<string, string>;
export type CounterDelta = { name: string; labels: Labels; value: number };
/** `counts[i]` = observations in bucket i (not cumulative); the last slot is +Inf. */
export type HistogramDelta = { name: string; labels: Labels; counts: number[]; sum: number; count: number };
export type MetricsDelta = { counters: CounterDelta[]; histograms: HistogramDelta[] };

const counters = new Map<string, CounterDelta>();
const histograms = new Map<string, HistogramDelta>();

/** A stable key for a series: name plus labels in key order. */
export function seriesKey(name: string, labels: Labels): string {
  return `${name}${JSON.stringify(Object.entries(labels).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)))}`;
}

/**
 * The key of a series in this isolate's maps, made on every request: plain concatenation, the
 * label keys in sort order so one series is one entry whatever order a call names them in. The
 * keys are a handful, sorted in place: Array.prototype.sort copies them into a work array of
 * its own, several times a request. Never stored (the Metrics shards key their rows by
 * seriesKey). A NUL cannot appear in a label: the catalog's values are ids, routes and codes.
 */
function isolateKey(name: string, labels: Labels): string {
  const keys = Object.keys(labels);
  for (let i = 1; i < keys.length; i++) {
    const k = keys[i] ?? '';
    let j = i - 1;
    for (; j >= 0 && (keys[j] ?? '') > k; j--) {
      keys[j + 1] = keys[j] ?? '';
    }
    keys[j + 1] = k;
  }
  let key = name;
  for (const k of keys) {
    key += `\u0000${k}\u0000${labels[k]}`;
  }
  return key;
}

function addCounter(name: string, labels: Labels, value: number): void {
  const key = isolateKey(name, labels);
  const c = counters.get(key);
  if (c) {
    c.value += value;
  } else {
    counters.set(key, { name, labels: { ...labels }, value });
  }
}

function addHistogram(d: HistogramDelta): void {
  const key = isolateKey(d.name, d.labels);
  const h = histograms.get(key);
  if (h && h.counts.length === d.counts.length) {
    d.counts.forEach((n, i) => {
      h.counts[i] = (h.counts[i] ?? 0) + n;
    });
    h.sum += d.sum;
    h.count += d.count;
  } else {
    histograms.set(key, { ...d, labels: { ...d.labels }, counts: [...d.counts] });
  }
}

/** Adds `by` to a counter. */
export function count<N extends CounterName>(name: N, labels: CounterLabels<N>, by = 1): void {
  if (by > 0 && Number.isFinite(by)) {
    addCounter(name, labels, by);
  }
}

/** Records one observation in a histogram. */
export function observe<N extends HistogramName>(name: N, labels: HistogramLabels<N>, value: number): void {
  if (!Number.isFinite(value)) {
    return;
  }
  const bounds: readonly number[] = HISTOGRAMS[name].buckets;
  let i = 0;
  while (i < bounds.length && value > (bounds[i] ?? Number.POSITIVE_INFINITY)) {
    i++;
  }
  const key = isolateKey(name, labels);
  const h = histograms.get(key);
  if (h && h.counts.length === bounds.length + 1) {
    // The common case, once per request: no new series, nothing allocated.
    h.counts[i] = (h.counts[i] ?? 0) + 1;
    h.sum += value;
    h.count += 1;
    return;
  }
  const counts = new Array<number>(bounds.length + 1).fill(0);
  counts[i] = 1;
  addHistogram({ name, labels, counts, sum: value, count: 1 });
}

/** True when this isolate has counts not yet shipped. */
export function hasPending(): boolean {
  return counters.size > 0 || histograms.size > 0;
}

/** Removes and returns what accumulated since the last call. */
export function takeDelta(): MetricsDelta | undefined {
  if (!hasPending()) {
    return undefined;
  }
  const delta = { counters: [...counters.values()], histograms: [...histograms.values()] };
  counters.clear();
  histograms.clear();
  return delta;
}

/**
 * A running sum of deltas, series by series: each delta added costs its own series, not the
 * sum's. Histograms of another bucket layout (a build with other buckets) are not mixed: the
 * series with more observations is kept.
 */
export class DeltaSum {
  private readonly counters = new Map<string, CounterDelta>();
  private readonly histograms = new Map<string, HistogramDelta>();

  add(delta: MetricsDelta): void {
    for (const c of delta.counters) {
      const key = seriesKey(c.name, c.labels);
      const had = this.counters.get(key);
      this.counters.set(key, had ? { ...had, value: had.value + c.value } : c);
    }
    for (const h of delta.histograms) {
      const key = seriesKey(h.name, h.labels);
      const had = this.histograms.get(key);
      if (!had || had.counts.length !== h.counts.length) {
        this.histograms.set(key, !had || h.count > had.count ? h : had);
        continue;
      }
      this.histograms.set(key, {
        ...had,
        counts: had.counts.map((n, i) => n + (h.counts[i] ?? 0)),
        sum: had.sum + h.sum,
        count: had.count + h.count,
      });
    }
  }

  get empty(): boolean {
    return this.counters.size === 0 && this.histograms.size === 0;
  }

  /** The sum, series in key order. */
  total(): MetricsDelta {
    const byKey = <T>(m: Map<string, T>) => [...m].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([, v]) => v);
    return { counters: byKey(this.counters), histograms: byKey(this.histograms) };
  }
}

/** The sum of several deltas (the totals of every metrics shard), series by series. */
export function mergeDeltas(deltas: readonly MetricsDelta[]): MetricsDelta {
  const sum = new DeltaSum();
  for (const d of deltas) {
    sum.add(d);
  }
  return sum.total();
}
