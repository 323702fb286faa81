import { COUNTERS, HISTOGRAMS } from './catalog';
import type { Labels, MetricsDelta } from './registry';

// Prometheus text exposition format 0.0.4: `# HELP`, `# TYPE`, then one sample per line.

export type GaugeSample = { labels: Labels; value: number };
export type GaugeFamily = { name: string; help: string; samples: GaugeSample[] };

export const PROMETHEUS_CONTENT_TYPE = 'text/plain; version=0.0.4; charset=utf-8';

function escapeLabel(value: string): string {
  return value.replaceAll('\\', '\\\\').replaceAll('"', '\\"').replaceAll('\n', '\\n');
}

function escapeHelp(text: string): string {
  return text.replaceAll('\\', '\\\\').replaceAll('\n', '\\n');
}

function labelText(labels: Labels): string {
  const entries = Object.entries(labels);
  return entries.length === 0 ? '' : `{${entries.map(([k, v]) => `${k}="${escapeLabel(v)}"`).join(',')}}`;
}

function num(value: number): string {
  if (Number.isNaN(value)) {
    return 'NaN';
  }
  if (!Number.isFinite(value)) {
    return value > 0 ? '+Inf' : '-Inf';
  }
  return String(value);
}

function header(lines: string[], name: string, help: string, type: 'counter' | 'gauge' | 'histogram'): void {
  lines.push(`# HELP ${name} ${escapeHelp(help)}`, `# TYPE ${name} ${type}`);
}

/** Renders the totals (every catalogued family, even those with no samples yet) and the gauges. */
export function renderPrometheus(totals: MetricsDelta, gauges: GaugeFamily[]): string {
  const lines: string[] = [];
  for (const [name, def] of Object.entries(COUNTERS)) {
    header(lines, name, def.help, 'counter');
    for (const c of totals.counters.filter((s) => s.name === name)) {
      lines.push(`${name}${labelText(c.labels)} ${num(c.value)}`);
    }
  }
  for (const [name, def] of Object.entries(HISTOGRAMS)) {
    header(lines, name, def.help, 'histogram');
    const bounds: readonly number[] = def.buckets;
    for (const h of totals.histograms.filter((s) => s.name === name && s.counts.length === bounds.length + 1)) {
      let cumulative = 0;
      bounds.forEach((le, i) => {
        cumulative += h.counts[i] ?? 0;
        lines.push(`${name}_bucket${labelText({ ...h.labels, le: String(le) })} ${cumulative}`);
      });
      lines.push(`${name}_bucket${labelText({ ...h.labels, le: '+Inf' })} ${h.count}`);
      lines.push(`${name}_sum${labelText(h.labels)} ${num(h.sum)}`);
      lines.push(`${name}_count${labelText(h.labels)} ${h.count}`);
    }
  }
  for (const g of gauges) {
    header(lines, g.name, g.help, 'gauge');
    for (const s of g.samples) {
      lines.push(`${g.name}${labelText(s.labels)} ${num(s.value)}`);
    }
  }
  return `${lines.join('\n')}\n`;
}
