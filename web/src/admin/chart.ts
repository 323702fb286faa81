// A tiny line chart (SVG, no library): units sold over time for one sale.

const SVG = 'http://www.w3.org/2000/svg';
const WIDTH = 300;
const HEIGHT = 90;

export type Point = { t: number; v: number };

/** Polyline coordinates for points scaled into the chart box (time on x, value on y). */
export function chartPoints(points: readonly Point[], width = WIDTH, height = HEIGHT): string {
  const first = points[0];
  const last = points[points.length - 1];
  if (!first || !last) {
    return '';
  }
  const max = Math.max(1, ...points.map((p) => p.v));
  if (points.length === 1) {
    // One sample is a level, not a slope: draw it across the box.
    const y = (height - 2 - (first.v / max) * (height - 4)).toFixed(1);
    return `0.0,${y} ${width.toFixed(1)},${y}`;
  }
  const span = Math.max(1, last.t - first.t);
  return points
    .map((p) => {
      const x = ((p.t - first.t) / span) * width;
      const y = height - 2 - (p.v / max) * (height - 4);
      return `${x.toFixed(1)},${y.toFixed(1)}`;
    })
    .join(' ');
}

function node<K extends keyof SVGElementTagNameMap>(tag: K, attrs: Record<string, string>): SVGElementTagNameMap[K] {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) {
    el.setAttribute(k, v);
  }
  return el;
}

/** Draws `points` into `svg` (replacing what was there) and labels it for screen readers. */
export function drawChart(svg: SVGSVGElement, points: readonly Point[], label: string): void {
  svg.setAttribute('viewBox', `0 0 ${WIDTH} ${HEIGHT}`);
  svg.setAttribute('preserveAspectRatio', 'none');
  svg.setAttribute('role', 'img');
  svg.setAttribute('aria-label', label);
  const line = chartPoints(points);
  const children: SVGElement[] = [
    node('line', { class: 'axis', x1: '0', y1: String(HEIGHT - 1), x2: String(WIDTH), y2: String(HEIGHT - 1) }),
  ];
  if (line) {
    children.push(node('polygon', { class: 'area', points: `0,${HEIGHT} ${line} ${WIDTH},${HEIGHT}` }));
    children.push(node('polyline', { class: 'line', points: line }));
  }
  svg.replaceChildren(...children);
}
