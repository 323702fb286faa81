import * as z from 'zod/mini';
import type { ApiFail, ApiResult } from '../shared/api';
import { type Goods, ORDER_STATUSES, Paused, type Stats } from '../shared/contract';
import { byId, el } from '../shared/dom';
import { formatCount, formatDateTime } from '../shared/format';
import { saleState } from '../shared/sale';
import { drawChart, type Point } from './chart';
import { type AdminContext, adminJson } from './context';
import { QueuePanel } from './queue-panel';

/** Samples kept per sale for the chart: ten minutes at one per two seconds. */
const MAX_SAMPLES = 300;
/** The sales rate is measured over this window. */
const RATE_WINDOW_MS = 10_000;
/**
 * After a pause or resume the card trusts the answer for this long: the public goods list is
 * cached at the edge for a few seconds and may still show the state from before.
 */
const SWITCH_TRUST_MS = 10_000;

const Redriven = z.looseObject({ redriven: z.number() });

/** One sale on the dashboard: stock in the object, Postgres and the mirror, orders, pipeline, chart, pause. */
export class GoodsCard {
  readonly root: HTMLElement;
  private goods: Goods;
  private stats: Stats | undefined;
  private statsFailure: ApiFail | undefined;
  private readonly samples: Point[] = [];
  private busy = false;
  private switched: { status: string; until: number } | undefined;
  private readonly queue: QueuePanel;

  constructor(
    private readonly ctx: AdminContext,
    goods: Goods,
  ) {
    this.goods = goods;
    const template = byId('goods-card-template', HTMLTemplateElement);
    const fragment = template.content.cloneNode(true);
    const root = fragment instanceof DocumentFragment ? fragment.firstElementChild : null;
    if (!(root instanceof HTMLElement)) {
      throw new Error('the goods card template is empty');
    }
    this.root = root;
    this.root.dataset.goodsId = String(goods.goodsId);
    this.action('toggle-pause').addEventListener('click', () => void this.togglePause());
    this.action('redrive').addEventListener('click', () => void this.redrive());
    this.queue = new QueuePanel(ctx, this.root, goods.goodsId, (name) => this.field(name));
    ctx.i18n.apply(this.root);
  }

  get goodsId(): number {
    return this.goods.goodsId;
  }

  /** New data from one refresh; `goods` is undefined when the sale left the public list (ended). */
  update(goods: Goods | undefined, stats: ApiResult<Stats>, at: number): void {
    if (goods) {
      const switched = this.switched;
      const stale = switched && Date.now() < switched.until && goods.status !== switched.status && goods.remaining > 0;
      this.goods = stale ? { ...goods, status: switched.status } : goods;
      if (!stale) {
        this.switched = undefined;
      }
    }
    if (stats.ok) {
      this.stats = stats.data;
      this.statsFailure = undefined;
      if (stats.data.doRemaining !== null) {
        this.samples.push({ t: at, v: stats.data.totalStock - stats.data.doRemaining });
        if (this.samples.length > MAX_SAMPLES) {
          this.samples.shift();
        }
      }
    } else {
      this.statsFailure = stats;
    }
    this.render();
  }

  render(): void {
    const { i18n } = this.ctx;
    const g = this.goods;
    const s = this.stats;
    const state = saleState({ ...g, remaining: s?.doRemaining ?? g.remaining }, this.ctx.clock.now());
    this.field('title').textContent = g.title;
    this.field('id').textContent = `#${g.goodsId}`;
    const badge = this.field('status');
    badge.textContent = i18n.t(`status${state}`);
    badge.dataset.state = state;
    this.field('window').textContent = i18n.t('window', {
      start: formatDateTime(g.startAt, i18n.locale),
      end: formatDateTime(g.endAt, i18n.locale),
    });
    this.field('total').textContent = i18n.t('total', { n: formatCount(s?.totalStock ?? g.totalStock, i18n.locale) });
    this.field('doRemaining').textContent = formatCount(s?.doRemaining, i18n.locale);
    this.field('dbStock').textContent = formatCount(s?.dbStock, i18n.locale);
    this.field('mirrorStock').textContent =
      s && (s.mirrorStock === null || s.mirrorStock === undefined) ? i18n.t('mirrorOff') : formatCount(s?.mirrorStock, i18n.locale);
    const consistent = this.field('consistent');
    consistent.hidden = !s;
    consistent.textContent = s ? i18n.t(s.consistent ? 'consistent' : 'inconsistent') : '';
    consistent.dataset.state = String(s?.consistent ?? '');
    this.renderOrders(s);
    this.field('queued').textContent = formatCount(s?.queued, i18n.locale);
    this.field('outboxPending').textContent = formatCount(s?.outboxPending, i18n.locale);
    this.field('heldResultReads').textContent = formatCount(s?.heldResultReads, i18n.locale);
    this.field('deadLetters').textContent = formatCount(s?.deadLetters, i18n.locale);
    this.field('refusedUnits').textContent = formatCount(s?.refusedUnits, i18n.locale);
    this.queue.render(s);
    this.action('redrive').hidden = !s?.deadLetters;
    this.renderChart();
    const toggle = this.action('toggle-pause');
    toggle.textContent = i18n.t(g.status === 'PAUSED' ? 'resume' : 'pause');
    toggle.setAttribute('aria-pressed', String(g.status === 'PAUSED'));
    toggle.setAttribute('aria-disabled', String(this.busy || state === 'ENDED'));
    if (this.statsFailure) {
      this.field('window').textContent = i18n.t('failed', { message: this.statsFailure.message });
    }
  }

  private renderOrders(s: Stats | undefined): void {
    const { i18n } = this.ctx;
    const body = this.field('orders');
    body.replaceChildren(
      ...ORDER_STATUSES.map((status) => {
        const row = el('tr');
        const th = el('th', '', i18n.t(status));
        th.scope = 'row';
        row.append(th, el('td', 'num', formatCount(s?.orders[status], i18n.locale)));
        return row;
      }),
    );
  }

  private renderChart(): void {
    const { i18n } = this.ctx;
    const first = this.samples[0];
    const last = this.samples[this.samples.length - 1];
    const svg = this.root.querySelector('svg[data-field="chart"]');
    if (!(svg instanceof SVGSVGElement)) {
      return;
    }
    const minutes = first && last ? Math.max(1, Math.round((last.t - first.t) / 60_000)) : 0;
    drawChart(svg, this.samples, i18n.t('chartLabel', { first: first?.v ?? 0, last: last?.v ?? 0, minutes }));
    const since = last ? [...this.samples].reverse().find((p) => last.t - p.t >= RATE_WINDOW_MS) : undefined;
    const rate = last && since ? (last.v - since.v) / ((last.t - since.t) / 1000) : 0;
    this.field('rate').textContent = i18n.t('salesRate', { rate: rate.toFixed(1) });
  }

  private async togglePause(): Promise<void> {
    if (this.busy || saleState(this.goods, this.ctx.clock.now()) === 'ENDED') {
      return;
    }
    const pause = this.goods.status !== 'PAUSED';
    this.busy = true;
    this.render();
    try {
      const res = await adminJson(this.ctx, `/admin/goods/${this.goodsId}/${pause ? 'pause' : 'resume'}`, Paused, { method: 'POST' });
      if (!res.ok) {
        this.ctx.say(this.ctx.i18n.t('failed', { message: res.message }));
        return;
      }
      const paused = res.data.paused ?? pause;
      // Shown at once; the next refresh confirms it from the object.
      const status = paused ? 'PAUSED' : this.goods.status === 'PAUSED' ? 'ON_SALE' : this.goods.status;
      this.goods = { ...this.goods, status };
      this.switched = { status, until: Date.now() + SWITCH_TRUST_MS };
      this.ctx.say(this.ctx.i18n.t(paused ? 'paused' : 'resumed', { id: this.goodsId }));
    } finally {
      this.busy = false;
      this.render();
    }
  }

  private async redrive(): Promise<void> {
    const res = await adminJson(this.ctx, '/admin/dead-letters/redrive', Redriven, { method: 'POST', body: { goodsId: this.goodsId } });
    this.ctx.say(res.ok ? this.ctx.i18n.t('redriveDone', { n: res.data.redriven }) : this.ctx.i18n.t('failed', { message: res.message }));
  }

  private field(name: string): HTMLElement {
    const found = this.root.querySelector(`[data-field="${name}"]`);
    if (!(found instanceof HTMLElement)) {
      throw new Error(`goods card field ${name} is missing`);
    }
    return found;
  }

  private action(name: string): HTMLButtonElement {
    const found = this.root.querySelector(`[data-action="${name}"]`);
    if (!(found instanceof HTMLButtonElement)) {
      throw new Error(`goods card action ${name} is missing`);
    }
    return found;
  }
}
