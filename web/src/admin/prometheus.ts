// Reads the Prometheus text format of GET /admin/metrics and turns counters into rates
// between two scrapes. Pure, so it is unit-tested in Node.

export type Sample = { name: string; labels: Record<string, string>; value: number };

const LINE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+\S+)?\s*$/;
const LABEL = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"\s*,?\s*/gy;

function unescapeLabel(value: string): string {
  return value.replace(/\\(["\\n])/g, (_, c: string) => (c === 'n' ? '\n' : c));
}

function parseValue(text: string): number {
  if (text === '+Inf') {
    return Number.POSITIVE_INFINITY;
  }
  if (text === '-Inf') {
    return Number.NEGATIVE_INFINITY;
  }
  return Number(text);
}

/** Every sample line; comments, blank and malformed lines are skipped. */
export function parsePrometheus(text: string): Sample[] {
  const samples: Sample[] = [];
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    if (!line || line.startsWith('#')) {
      continue;
    }
    const m = LINE.exec(line);
    if (!m?.[1] || m[4] === undefined) {
      continue;
    }
    const labels: Record<string, string> = {};
    const body = m[3] ?? '';
    LABEL.lastIndex = 0;
    let consumed = 0;
    for (let lm = LABEL.exec(body); lm; lm = LABEL.exec(body)) {
      if (lm[1] !== undefined && lm[2] !== undefined) {
        labels[lm[1]] = unescapeLabel(lm[2]);
      }
      consumed = LABEL.lastIndex;
    }
    const value = parseValue(m[4]);
    if (consumed !== body.length || Number.isNaN(value)) {
      continue;
    }
    samples.push({ name: m[1], labels, value });
  }
  return samples;
}

function seriesKey(s: Sample): string {
  return `${s.name}{${Object.keys(s.labels)
    .sort()
    .map((k) => `${k}=${s.labels[k]}`)
    .join(',')}}`;
}

/** Per-second rate of each counter series between two scrapes `seconds` apart. */
export function counterRates(previous: Sample[], current: Sample[], seconds: number): Sample[] {
  if (seconds <= 0) {
    return [];
  }
  const before = new Map(previous.map((s) => [seriesKey(s), s.value]));
  return current.map((s) => {
    const prev = before.get(seriesKey(s));
    // A counter that went down was reset (a new isolate or object): count from zero.
    const delta = prev === undefined ? 0 : s.value >= prev ? s.value - prev : s.value;
    return { ...s, value: delta / seconds };
  });
}

/** Counter rates between each scrape and the one before it, of the series `keep` selects. */
export class RateWindow {
  private previous: { samples: Sample[]; at: number } | undefined;

  constructor(private readonly keep: (s: Sample) => boolean) {}

  /** The rates since the last scrape (`at` in ms); undefined for the first. */
  next(text: string, at: number): Sample[] | undefined {
    const samples = parsePrometheus(text).filter(this.keep);
    const previous = this.previous;
    this.previous = { samples, at };
    return previous ? counterRates(previous.samples, samples, (at - previous.at) / 1000) : undefined;
  }
}

/** Sums samples of `name` by one label (e.g. requests by outcome), optionally filtered. */
export function sumBy(samples: Sample[], name: string, label: string, keep: (s: Sample) => boolean = () => true): Map<string, number> {
  const out = new Map<string, number>();
  for (const s of samples) {
    if (s.name !== name || !keep(s)) {
      continue;
    }
    const key = s.labels[label] ?? '';
    out.set(key, (out.get(key) ?? 0) + s.value);
  }
  return out;
}
