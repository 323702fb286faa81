import * as z from 'zod/mini';
import { type ApiFail, callJson, routeMissing } from '../shared/api';
import { Order, type OrderStatus, Payment } from '../shared/contract';
import { byId, loadLocal, saveLocal } from '../shared/dom';
import { formatMinutes, formatMoney } from '../shared/format';
import { type ShopperContext, sleep, storageKeys } from './context';
import type { GoodsView } from './goods-view';
import type { ShopperKey } from './messages';
import { ClickGuard } from './pacing';

/** How long the page waits, polling each second, for the provider to confirm a payment. */
const PAY_CONFIRM_POLLS = 30;
/** Checks the order again this long after its payment window closes (the server closes it). */
const AFTER_DEADLINE_RECHECK_MS = 5_000;

const Stored = z.object({ orderId: z.string(), estimatedDeadline: z.number() });
/** A provider that takes the shopper to its own checkout answers `nextAction: {kind: 'redirect', url}`. */
const Redirect = z.object({ nextAction: z.optional(z.object({ kind: z.string(), url: z.string() })) });

/**
 * The order after a successful purchase: number, amount, a payment countdown on the
 * server's clock, pay and cancel.
 */
export class OrderView {
  private order: Order | undefined;
  private estimatedDeadline = 0;
  private recheckTimer: ReturnType<typeof setTimeout> | undefined;
  private readonly payGuard = new ClickGuard();
  private readonly els = {
    root: byId('order', HTMLElement),
    title: byId('order-title', HTMLElement),
    no: byId('order-no', HTMLElement),
    amount: byId('order-amount', HTMLElement),
    unitsLabel: byId('order-units-label', HTMLElement),
    units: byId('order-units', HTMLElement),
    status: byId('order-status', HTMLElement),
    payRow: byId('pay-row', HTMLElement),
    payCountdown: byId('pay-countdown', HTMLElement),
    actions: byId('order-actions', HTMLElement),
    pay: byId('pay', HTMLButtonElement),
    payLabel: byId('pay-label', HTMLElement),
    cancel: byId('cancel', HTMLButtonElement),
    message: byId('order-message', HTMLElement),
  };

  constructor(
    private readonly ctx: ShopperContext,
    private readonly view: GoodsView,
    /** Tells the page whether the shopper holds a live (pending or paid) order, and which order it shows. */
    private readonly onLive: (live: boolean, order?: Order) => void,
  ) {
    this.els.pay.addEventListener('click', () => void this.pay());
    this.els.cancel.addEventListener('click', () => void this.cancel());
    ctx.i18n.onChange(() => this.render());
  }

  /** A purchase just succeeded: remember the order and show it, focused. */
  async opened(orderId: string): Promise<void> {
    const session = this.ctx.session();
    if (!session) {
      return;
    }
    // Until the order itself is read, the deadline is estimated from the goods' settings.
    const estimatedDeadline = this.ctx.clock.now() + (this.view.goods?.payTimeoutSeconds ?? 900) * 1000;
    saveLocal(storageKeys.order(session.userId, this.view.goodsId), JSON.stringify({ orderId, estimatedDeadline }));
    await this.show(orderId, estimatedDeadline);
    this.els.title.focus();
  }

  /** Shows the order remembered for this shopper and goods, if any (after a reload). */
  async restore(): Promise<void> {
    const session = this.ctx.session();
    const raw = session && loadLocal(storageKeys.order(session.userId, this.view.goodsId));
    let parsed: unknown;
    try {
      parsed = raw ? JSON.parse(raw) : undefined;
    } catch {
      parsed = undefined;
    }
    const stored = Stored.safeParse(parsed);
    if (stored.success) {
      await this.show(stored.data.orderId, stored.data.estimatedDeadline);
    } else {
      this.hide();
    }
  }

  hide(): void {
    this.order = undefined;
    this.els.root.hidden = true;
    clearTimeout(this.recheckTimer);
    this.onLive(false);
  }

  /** Once a second: the payment countdown. */
  tick(): void {
    const order = this.order;
    if (order?.status !== 'PENDING_PAYMENT') {
      return;
    }
    const left = (order.payDeadline ?? this.estimatedDeadline) - this.ctx.clock.now();
    this.els.payCountdown.textContent = formatMinutes(left);
    if (left <= 0 && this.els.actions.hidden === false) {
      this.els.actions.hidden = true;
      this.message('payExpired');
      this.recheckTimer = setTimeout(() => void this.reload(), AFTER_DEADLINE_RECHECK_MS);
    }
  }

  private async show(orderId: string, estimatedDeadline: number): Promise<void> {
    this.estimatedDeadline = estimatedDeadline;
    this.order = { orderId, status: 'PENDING_PAYMENT' };
    this.els.root.hidden = false;
    this.render();
    await this.reload();
  }

  /** Reads the order from the server; answers its status, or undefined when it cannot be read. */
  private async reload(): Promise<OrderStatus | undefined> {
    const session = this.ctx.session();
    const current = this.order;
    if (!session || !current) {
      return undefined;
    }
    const res = await callJson(`/api/orders/${encodeURIComponent(current.orderId)}`, Order, { auth: session.token });
    if (!res.ok) {
      this.failed(res, 'orderDetailsUnavailable');
      return undefined;
    }
    this.order = res.data;
    this.render();
    return res.data.status;
  }

  private render(): void {
    const order = this.order;
    if (!order) {
      return;
    }
    const { i18n } = this.ctx;
    const live = order.status === 'PENDING_PAYMENT' || order.status === 'PAID';
    this.els.no.textContent = order.orderNo ?? order.orderId;
    // Several units are shown as such; the amount is what they cost together.
    const units = order.quantity ?? 1;
    const several = units > 1 || (this.view.goods?.perUserLimit ?? 1) > 1;
    this.els.unitsLabel.hidden = !several;
    this.els.units.hidden = !several;
    this.els.units.textContent = String(units);
    const price = order.priceCents ?? this.view.goods?.priceCents;
    const cents = order.amountCents ?? (price === undefined ? undefined : price * units);
    this.els.amount.textContent = cents === undefined ? '—' : formatMoney(cents, this.ctx.currency, i18n.locale);
    this.els.status.textContent = i18n.t(`order${order.status}`);
    const pending = order.status === 'PENDING_PAYMENT';
    this.els.payRow.hidden = !pending;
    this.els.actions.hidden = !pending;
    if (order.status === 'PAID') {
      this.message('paidMessage');
    } else if (order.status === 'CANCELLED') {
      this.message('cancelledMessage');
    } else if (order.status === 'CLOSED_TIMEOUT') {
      this.message('reasonCLOSED_TIMEOUT');
    }
    if (!live) {
      this.forget();
    }
    this.onLive(live, order);
    this.tick();
  }

  private async pay(): Promise<void> {
    const session = this.ctx.session();
    const order = this.order;
    if (!session || !order || order.status !== 'PENDING_PAYMENT' || !this.payGuard.tryEnter()) {
      return;
    }
    this.busy(this.els.pay, true);
    this.els.payLabel.textContent = this.ctx.i18n.t('paying');
    try {
      const res = await callJson(`/api/orders/${encodeURIComponent(order.orderId)}/pay`, Payment, {
        method: 'POST',
        auth: session.token,
        body: {},
      });
      if (!res.ok) {
        this.failed(res, 'payUnavailable');
        return;
      }
      // A hosted checkout (a real provider) takes over the page; the sandbox pays in place.
      const next = Redirect.safeParse(res.data);
      const target = next.success && next.data.nextAction?.kind === 'redirect' ? next.data.nextAction.url : undefined;
      if (target && /^https:\/\//.test(target)) {
        location.assign(target);
        return;
      }
      this.message(res.data.provider === 'sandbox' ? 'payStartedSandbox' : 'payStarted');
      for (let i = 0; i < PAY_CONFIRM_POLLS; i++) {
        const status = await this.reload();
        if (status !== undefined && status !== 'PENDING_PAYMENT') {
          if (status === 'PAID') {
            this.els.title.focus();
          }
          return;
        }
        await sleep(1000);
      }
      this.message('payPending');
    } finally {
      this.payGuard.release();
      this.busy(this.els.pay, false);
      this.els.payLabel.textContent = this.ctx.i18n.t('pay');
    }
  }

  private async cancel(): Promise<void> {
    const session = this.ctx.session();
    const order = this.order;
    if (!session || !order || order.status !== 'PENDING_PAYMENT' || !this.payGuard.tryEnter()) {
      return;
    }
    if (!window.confirm(this.ctx.i18n.t('cancelConfirm'))) {
      this.payGuard.release();
      return;
    }
    this.busy(this.els.cancel, true);
    try {
      const res = await callJson(`/api/orders/${encodeURIComponent(order.orderId)}/cancel`, Order, {
        method: 'POST',
        auth: session.token,
      });
      if (!res.ok) {
        this.failed(res, 'payUnavailable');
        return;
      }
      this.order = res.data;
      this.render();
      void this.view.refresh();
      this.els.title.focus();
    } finally {
      this.payGuard.release();
      this.busy(this.els.cancel, false);
    }
  }

  private failed(fail: ApiFail, missingKey: ShopperKey): void {
    if (fail.code === 'UNAUTHENTICATED') {
      this.ctx.sessionExpired();
    } else if (routeMissing(fail)) {
      this.message(missingKey, { id: this.order?.orderId ?? '' });
    } else {
      this.message('reasonUNKNOWN', { message: fail.message || fail.code });
    }
  }

  private forget(): void {
    const session = this.ctx.session();
    if (session) {
      saveLocal(storageKeys.order(session.userId, this.view.goodsId), undefined);
    }
  }

  private busy(button: HTMLButtonElement, busy: boolean): void {
    button.setAttribute('aria-disabled', String(busy));
    button.classList.toggle('is-busy', busy);
  }

  private message(key: ShopperKey, vars?: Record<string, string | number>): void {
    this.els.message.textContent = this.ctx.i18n.t(key, vars);
  }
}
