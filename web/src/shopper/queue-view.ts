import { callJson } from '../shared/api';
import { Result } from '../shared/contract';
import { byId } from '../shared/dom';
import { formatTimeOfDay } from '../shared/format';
import type { SaleState } from '../shared/sale';
import type { ShopperContext } from './context';
import type { GoodsView } from './goods-view';
import { joinThroughLive, joinUrl } from './live-join';
import type { ShopperKey } from './messages';
import { type LineDeps, type LineView, liveUrl, type SocketLike, TicketAnswer, WaitingLine } from './waiting-line';

/** A failed join is tried again after this long (the room may not be open yet, or be busy). */
const JOIN_RETRY_MS = 5_000;

const LINE_KEYS: Record<LineView['state'], ShopperKey> = {
  WAITING: 'lineWaiting',
  ADMITTED: 'lineAdmitted',
  SOLD_OUT: 'lineSoldOut',
  EXPIRED: 'lineExpired',
};

/**
 * The waiting-room panel of a goods that has one: joins when the room is open, then shows the
 * place in line, the ETA and the live channel's state, feeds the stock bar from the room's
 * events, and hands the admission pass and the live results to the buy flow.
 */
export class QueueView {
  private line: WaitingLine | undefined;
  private joining = false;
  private joinAfter = 0;
  private userId: string | undefined;
  private readonly els = {
    root: byId('line', HTMLElement),
    state: byId('line-state', HTMLElement),
    position: byId('line-position', HTMLElement),
    eta: byId('line-eta', HTMLElement),
    conn: byId('line-conn', HTMLElement),
    rejoin: byId('line-rejoin', HTMLButtonElement),
  };

  constructor(
    private readonly ctx: ShopperContext,
    private readonly view: GoodsView,
    private readonly onChange: () => void,
  ) {
    this.els.rejoin.addEventListener('click', () => void this.join());
  }

  /** Whether this goods makes shoppers join a line before buying. */
  get on(): boolean {
    const mode = this.view.goods?.queue?.mode;
    return mode !== undefined && mode !== 'off';
  }

  /** True while the shopper is in line and may not buy yet. */
  holding(): boolean {
    return this.on && !this.pass();
  }

  /** The admission pass to send with X-Admission-Pass, when admitted. */
  pass(): string | undefined {
    return this.line?.pass(this.ctx.clock.now());
  }

  /** The result of a purchase over the live channel; undefined when the goods has no line. */
  awaitResult(requestId: string): Promise<Result> | undefined {
    return this.line?.awaitResult(requestId);
  }

  forget(requestId: string): void {
    this.line?.forget(requestId);
  }

  /** Called every second: joins once the room is open and the shopper signed in. */
  update(state: SaleState | undefined): void {
    const session = this.ctx.session();
    if (session?.userId !== this.userId) {
      this.reset();
      this.userId = session?.userId;
    }
    const g = this.view.goods;
    const open = g?.queue?.opensAt === undefined || this.ctx.clock.now() >= g.queue.opensAt;
    const live = state === 'ON_SALE' || (state === 'UPCOMING' && open);
    if (this.on && session && live && !this.line && !this.joining && Date.now() >= this.joinAfter) {
      void this.join();
    }
    this.render();
  }

  /** Leaves the line on this page (sign-out, another shopper): the next shopper joins anew. */
  reset(): void {
    this.line?.stop();
    this.line = undefined;
    this.joinAfter = 0;
    this.render();
  }

  /** The token route said NOT_ADMITTED: the pass lapsed or the line came on; join again. */
  notAdmitted(): void {
    void this.join();
  }

  private async join(): Promise<void> {
    const session = this.ctx.session();
    if (!session || this.joining) {
      return;
    }
    this.joining = true;
    try {
      const goodsId = this.view.goodsId;
      const deps: LineDeps = {
        openSocket: (url, protocols) => new WebSocket(url, protocols) as SocketLike,
        fetchTicket: async (ticket) => {
          const r = await callJson(`/api/seckill/goods/${goodsId}/queue/${encodeURIComponent(ticket)}`, TicketAnswer);
          return r.ok ? r.data : undefined;
        },
        fetchResult: async (requestId) => {
          const r = await callJson(`/api/seckill/result/${encodeURIComponent(requestId)}`, Result, { auth: session.token });
          return r.ok ? r.data : undefined;
        },
        setTimer: (fn, ms) => setTimeout(fn, ms),
        clearTimer: (timer) => clearTimeout(timer as ReturnType<typeof setTimeout>),
        random: Math.random,
      };
      const urlFor = (ticket: string) => liveUrl(location.origin, goodsId, ticket);
      // First in line: join as the live channel opens (one request to the room); a refusal, or a
      // browser that cannot, joins with the join route below, which also says why.
      const joined = this.line ? undefined : await joinThroughLive(deps, joinUrl(location.origin, goodsId), session.token);
      if (this.ctx.session()?.userId !== session.userId) {
        joined?.socket.close();
        return;
      }
      if (joined) {
        this.line = new WaitingLine(deps, urlFor, joined.answer.ticket, joined.answer, (line) => this.changed(line));
        this.line.start(joined.socket);
        return;
      }
      const res = await callJson(`/api/seckill/goods/${goodsId}/queue`, TicketAnswer, { method: 'POST', auth: session.token });
      if (this.ctx.session()?.userId !== session.userId) {
        return;
      }
      if (!res.ok) {
        this.joinAfter = Date.now() + JOIN_RETRY_MS;
        if (res.code === 'UNAUTHENTICATED') {
          this.ctx.sessionExpired();
        } else if (res.code === 'ENDED') {
          void this.view.refresh();
        }
        return;
      }
      if (this.line) {
        this.line.rejoined(res.data);
        return;
      }
      this.line = new WaitingLine(deps, urlFor, res.data.ticket, res.data, (line) => this.changed(line));
      this.line.start();
    } finally {
      this.joining = false;
      this.render();
    }
  }

  private changed(line: LineView): void {
    if (line.remaining !== undefined) {
      this.view.setRemaining(line.state === 'SOLD_OUT' ? 0 : line.remaining);
    }
    this.render();
    this.onChange();
  }

  private render(): void {
    const { i18n } = this.ctx;
    const line = this.line?.state;
    const shown = this.on && Boolean(this.ctx.session());
    this.els.root.hidden = !shown;
    if (!shown) {
      return;
    }
    if (!line) {
      this.els.state.textContent = i18n.t(this.joining ? 'lineJoining' : 'lineBeforeOpen');
      this.els.position.textContent = '';
      this.els.eta.textContent = '';
      this.els.conn.textContent = '';
      this.els.rejoin.hidden = true;
      return;
    }
    this.els.root.dataset.state = line.state;
    this.els.state.textContent = i18n.t(LINE_KEYS[line.state]);
    const waiting = line.state === 'WAITING';
    // Before the draw a pre-queue shopper's place is not known yet, only how many wait with them.
    const drawAt = line.drawAt !== undefined && this.ctx.clock.now() < line.drawAt ? line.drawAt : undefined;
    this.els.position.textContent = waiting
      ? drawAt !== undefined
        ? i18n.t('linePreQueue', { n: line.position, time: formatTimeOfDay(drawAt, i18n.locale) })
        : i18n.t('linePosition', { n: line.position + 1 })
      : '';
    this.els.eta.textContent = waiting && drawAt === undefined ? i18n.t('lineEta', { s: Math.max(1, Math.round(line.etaSeconds)) }) : '';
    this.els.conn.textContent = i18n.t(line.connected ? 'lineLive' : 'lineReconnecting');
    this.els.conn.dataset.state = line.connected ? 'live' : 'down';
    this.els.rejoin.hidden = line.state !== 'EXPIRED';
  }
}
