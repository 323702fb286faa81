// Reading the Prometheus text format: the metrics tests' parser, pure so the unit tests run it in Node.

/** One sample of a Prometheus text exposition. */
export type PromSample = { name: string; labels: Record<string, string>; value: number };

/**
 * A strict parser of the Prometheus text format (0.0.4): every line must be a HELP, a TYPE or
 * a well-formed sample, every sample's family must have been TYPEd before it, and a family is
 * TYPEd once. Throws naming the first bad line.
 */
export function parsePrometheus(text: string): { types: Map<string, string>; samples: PromSample[] } {
  const types = new Map<string, string>();
  const samples: PromSample[] = [];
  const nameRe = '[a-zA-Z_:][a-zA-Z0-9_:]*';
  const sampleRe = new RegExp(`^(${nameRe})(?:\\{(.*)\\})? (-?[0-9.e+-]+|NaN|[+-]Inf)$`);
  const labelRe = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\.)*)"(?:,|$)/y;
  const familyOf = (name: string) => {
    for (const suffix of ['_bucket', '_sum', '_count']) {
      const base = name.slice(0, -suffix.length);
      if (name.endsWith(suffix) && types.get(base) === 'histogram') {
        return base;
      }
    }
    return name;
  };
  if (!text.endsWith('\n')) {
    throw new Error('the exposition must end with a newline');
  }
  for (const [i, line] of text.slice(0, -1).split('\n').entries()) {
    const bad = (why: string) => new Error(`line ${i + 1} ${why}: ${line}`);
    if (line.startsWith('# HELP ')) {
      if (!new RegExp(`^# HELP ${nameRe} .*$`).test(line)) {
        throw bad('is not a HELP line');
      }
      continue;
    }
    if (line.startsWith('# TYPE ')) {
      const m = line.match(new RegExp(`^# TYPE (${nameRe}) (counter|gauge|histogram|summary|untyped)$`));
      if (!m?.[1] || !m[2] || types.has(m[1])) {
        throw bad('is not a TYPE line, or repeats one');
      }
      types.set(m[1], m[2]);
      continue;
    }
    const m = line.match(sampleRe);
    if (!m?.[1] || m[3] === undefined) {
      throw bad('is not a sample');
    }
    const labels: Record<string, string> = {};
    if (m[2]) {
      labelRe.lastIndex = 0;
      while (labelRe.lastIndex < m[2].length) {
        const l = labelRe.exec(m[2]);
        if (!l?.[1] || l[2] === undefined) {
          throw bad('has malformed labels');
        }
        labels[l[1]] = l[2].replace(/\\(.)/g, (_, c: string) => (c === 'n' ? '\n' : c));
      }
    }
    if (!types.has(familyOf(m[1]))) {
      throw bad('has no TYPE before it');
    }
    const value = m[3] === '+Inf' ? Number.POSITIVE_INFINITY : m[3] === '-Inf' ? Number.NEGATIVE_INFINITY : Number(m[3]);
    samples.push({ name: m[1], labels, value });
  }
  return { types, samples };
}

/** The value of the sample `name` whose labels include `labels` (0 when there is none). */
export function metric(scraped: { samples: PromSample[] }, name: string, labels: Record<string, string> = {}): number {
  const match = scraped.samples.filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v));
  return match.reduce((sum, s) => sum + s.value, 0);
}
