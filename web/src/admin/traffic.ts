import type { ApiResult } from '../shared/api';
import { routeMissing } from '../shared/api';
import { byId, el } from '../shared/dom';
import type { AdminContext } from './context';
import { RateWindow, type Sample, sumBy } from './prometheus';

const REQUESTS = 'seckill_http_requests_total';
/** The purchase route's pattern contains the hidden-path segment. */
const isPurchase = (s: Sample) => /\/do\//.test(s.labels.route ?? '');

/** Request outcomes per second (accepted, sold_out, rate_limited, ...), from two metric scrapes. */
export class TrafficView {
  private readonly window = new RateWindow((s) => s.name === REQUESTS);
  private readonly els = {
    table: byId('traffic', HTMLTableElement),
    rows: byId('traffic-rows', HTMLTableSectionElement),
    note: byId('traffic-note', HTMLElement),
  };

  constructor(private readonly ctx: AdminContext) {}

  update(metrics: ApiResult<string>, at: number): void {
    const { i18n } = this.ctx;
    if (!metrics.ok) {
      this.els.table.hidden = true;
      this.els.note.textContent = routeMissing(metrics) ? i18n.t('trafficUnavailable') : i18n.t('failed', { message: metrics.message });
      return;
    }
    const rates = this.window.next(metrics.data, at);
    if (!rates) {
      this.els.note.textContent = i18n.t('trafficWaiting');
      return;
    }
    const all = sumBy(rates, REQUESTS, 'outcome');
    const purchase = sumBy(rates, REQUESTS, 'outcome', isPurchase);
    const outcomes = [...all.entries()].filter(([, rate]) => rate > 0).sort((a, b) => b[1] - a[1]);
    this.els.rows.replaceChildren(
      ...outcomes.map(([outcome, rate]) => {
        const row = el('tr');
        const th = el('th', '', outcome);
        th.scope = 'row';
        row.append(th, el('td', 'num', (purchase.get(outcome) ?? 0).toFixed(1)), el('td', 'num', rate.toFixed(1)));
        return row;
      }),
    );
    this.els.table.hidden = outcomes.length === 0;
    this.els.note.textContent = outcomes.length === 0 ? i18n.t('trafficIdle') : '';
  }
}
