import { type ApiFail, callJson } from '../shared/api';
import { Goods } from '../shared/contract';
import { byId } from '../shared/dom';
import { formatCountdown, formatMoney, formatTimeOfDay, remainingPercent } from '../shared/format';
import { type SaleState, saleState } from '../shared/sale';
import type { ShopperContext } from './context';

/** Stock and status refresh while the sale is live; slower once it is over. */
const REFRESH_LIVE_MS = 10_000;
const REFRESH_IDLE_MS = 30_000;
/** Spreads refreshes so a crowd that opened the page together does not poll together. */
const REFRESH_JITTER_MS = 3_000;
const PLACEHOLDER_IMAGE = '/img/goods-placeholder.svg';

/**
 * One goods: picture, price, a countdown on the server's clock, the stock bar. It keeps
 * itself fresh and tells the page when the sale's state changes (e.g. the start second).
 */
export class GoodsView {
  goods: Goods | undefined;
  private lastState: SaleState | undefined;
  private refreshTimer: ReturnType<typeof setTimeout> | undefined;
  private readonly els = {
    root: byId('goods', HTMLElement),
    image: byId('goods-image', HTMLImageElement),
    title: byId('goods-title', HTMLElement),
    price: byId('goods-price', HTMLElement),
    badge: byId('goods-badge', HTMLElement),
    countdownLabel: byId('countdown-label', HTMLElement),
    countdown: byId('countdown', HTMLElement),
    serverTime: byId('server-time', HTMLTimeElement),
    bar: byId('stock-bar', HTMLElement),
    fill: byId('stock-fill', HTMLElement),
    pct: byId('stock-pct', HTMLElement),
    count: byId('stock-count', HTMLElement),
  };

  constructor(
    private readonly ctx: ShopperContext,
    readonly goodsId: number,
    private readonly onTick: (state: SaleState, changed: boolean) => void,
  ) {
    this.els.image.addEventListener('error', () => {
      if (!this.els.image.src.endsWith(PLACEHOLDER_IMAGE)) {
        this.els.image.src = PLACEHOLDER_IMAGE;
      }
    });
    document.addEventListener('visibilitychange', () => {
      if (document.visibilityState === 'visible') {
        void this.refresh();
      }
    });
  }

  /** Loads the goods (and a clock sample from its serverTime); answers the failure, if any. */
  async refresh(): Promise<ApiFail | undefined> {
    clearTimeout(this.refreshTimer);
    const res = await callJson(`/api/seckill/goods/${this.goodsId}`, Goods);
    if (res.ok) {
      this.ctx.clock.add({ serverTime: res.data.serverTime, sentAt: res.sentAt, receivedAt: res.receivedAt });
      this.goods = res.data;
      this.renderStatic();
      this.tick();
    }
    if (res.ok || res.status === 0 || res.status >= 429) {
      this.scheduleRefresh();
    }
    return res.ok ? undefined : res;
  }

  /** The sale's state now, on the server's clock. */
  state(): SaleState | undefined {
    return this.goods ? saleState(this.goods, this.ctx.clock.now()) : undefined;
  }

  /** A purchase was refused as sold out: show it without waiting for the next refresh. */
  markSoldOut(): void {
    if (this.goods) {
      this.goods = { ...this.goods, remaining: 0 };
      this.renderStatic();
      this.tick();
    }
  }

  /** The stock left as the waiting room's events tell it: the bar drains without a refresh. */
  setRemaining(remaining: number): void {
    if (this.goods && this.goods.remaining !== remaining) {
      this.goods = { ...this.goods, remaining };
      this.renderStatic();
      this.tick();
    }
  }

  /** Starts the once-a-second countdown, aligned to the server's second boundaries. */
  startTicking(): void {
    const loop = () => {
      this.tick();
      setTimeout(loop, 1000 - (this.ctx.clock.now() % 1000) + 5);
    };
    loop();
  }

  renderStatic(): void {
    const g = this.goods;
    if (!g) {
      return;
    }
    const { i18n } = this.ctx;
    this.els.root.hidden = false;
    document.title = `${g.title} · ${i18n.t('pageTitle')}`;
    this.els.title.textContent = g.title;
    const src = g.imageUrl || PLACEHOLDER_IMAGE;
    if (this.els.image.getAttribute('src') !== src) {
      this.els.image.src = src;
    }
    this.els.image.alt = g.title;
    this.els.price.textContent = formatMoney(g.priceCents, this.ctx.currency, i18n.locale);
    const remaining = Math.max(0, g.remaining);
    const pct = remainingPercent(remaining, g.totalStock);
    this.els.fill.style.setProperty('width', `${pct}%`);
    this.els.bar.setAttribute('aria-valuenow', String(pct));
    this.els.bar.setAttribute('aria-valuetext', i18n.t('remainingPct', { pct }));
    this.els.pct.textContent = i18n.t('remainingPct', { pct });
    this.els.count.textContent = i18n.t('remainingOf', { left: remaining, total: g.totalStock });
  }

  /** Updates the countdown and badge; reports the state (and whether it just changed). */
  tick(): void {
    const g = this.goods;
    if (!g) {
      return;
    }
    const { i18n, clock } = this.ctx;
    const now = clock.now();
    const state = saleState(g, now);
    this.els.serverTime.textContent = formatTimeOfDay(now, i18n.locale);
    this.els.serverTime.dateTime = new Date(now).toISOString();
    if (state === 'ENDED') {
      this.els.countdownLabel.textContent = i18n.t('saleOver');
      this.els.countdown.textContent = '';
    } else if (now < g.startAt) {
      this.els.countdownLabel.textContent = i18n.t('startsIn');
      this.els.countdown.textContent = formatCountdown(g.startAt - now, i18n.t('day'));
    } else {
      this.els.countdownLabel.textContent = i18n.t('endsIn');
      this.els.countdown.textContent = formatCountdown(g.endAt - now, i18n.t('day'));
    }
    this.els.badge.textContent = i18n.t(`status${state}`);
    this.els.badge.dataset.state = state;
    const changed = state !== this.lastState;
    this.lastState = state;
    this.onTick(state, changed);
  }

  private scheduleRefresh(): void {
    const state = this.state();
    const base = state === 'ON_SALE' || state === 'UPCOMING' || state === 'PAUSED' ? REFRESH_LIVE_MS : REFRESH_IDLE_MS;
    this.refreshTimer = setTimeout(
      () => {
        if (document.visibilityState === 'visible') {
          void this.refresh();
        } else {
          this.scheduleRefresh();
        }
      },
      base + Math.random() * REFRESH_JITTER_MS,
    );
  }
}
