import type { ApiResult } from '../shared/api';
import { byId, el } from '../shared/dom';
import type { AdminContext } from './context';
import { RateWindow, type Sample } from './prometheus';

// What the edge asked its sources, per second between two scrapes: its copies' renewals (the
// goods list, a goods page's stock, an allowlist, an activity's holders) by where they came
// from, and the sale rules' checks by what answered them. A crowd answered at the edge shows
// its sources hearing about one renewal a second per data center and copy.

const RENEWALS = 'seckill_edge_copy_renewals_total';
const CHECKS = 'seckill_edge_rule_checks_total';

/** A row: what was renewed or checked, from where or by what, and how often. */
type Row = { what: string; from: string; rate: number };

function rowOf(s: Sample): Row {
  return s.name === RENEWALS
    ? { what: s.labels.copy ?? '?', from: s.labels.source ?? '?', rate: s.value }
    : { what: `rule ${s.labels.rule ?? '?'}`, from: s.labels.answered_by ?? '?', rate: s.value };
}

export class EdgeSourcesView {
  private readonly window = new RateWindow((s) => s.name === RENEWALS || s.name === CHECKS);
  private readonly els = {
    table: byId('edge-sources', HTMLTableElement),
    rows: byId('edge-sources-rows', HTMLTableSectionElement),
    note: byId('edge-sources-note', HTMLElement),
  };

  constructor(private readonly ctx: AdminContext) {}

  update(metrics: ApiResult<string>, at: number): void {
    const { i18n } = this.ctx;
    // Without metrics the traffic panel says why.
    const rates = metrics.ok ? this.window.next(metrics.data, at) : undefined;
    const rows = (rates ?? [])
      .filter((s) => s.value > 0)
      .map(rowOf)
      .sort((a, b) => b.rate - a.rate);
    this.els.rows.replaceChildren(
      ...rows.map((r) => {
        const row = el('tr');
        const th = el('th', '', r.what);
        th.scope = 'row';
        row.append(th, el('td', '', r.from), el('td', 'num', r.rate.toFixed(1)));
        return row;
      }),
    );
    this.els.table.hidden = rows.length === 0;
    this.els.note.textContent = !metrics.ok ? '' : !rates ? i18n.t('trafficWaiting') : rows.length === 0 ? i18n.t('edgeSourcesIdle') : '';
  }
}
