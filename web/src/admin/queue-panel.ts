import * as z from 'zod/mini';
import type { Stats } from '../shared/contract';
import { el } from '../shared/dom';
import { formatCount, formatDelay } from '../shared/format';
import { type AdminContext, adminJson } from './context';

export const QUEUE_MODES = ['off', 'auto', 'always'] as const;
type Mode = (typeof QUEUE_MODES)[number];

/** After a switch the card shows the new mode for this long: the stats' settings may lag a few seconds. */
const SWITCH_TRUST_MS = 10_000;

const Echo = z.looseObject({ queue: z.optional(z.looseObject({ mode: z.string() })) });

function isMode(value: string | undefined): value is Mode {
  return QUEUE_MODES.some((m) => m === value);
}

/**
 * A goods card's waiting room and stock shards: the line's figures when it has one, a switch
 * for the mode (PUT /admin/goods/:id, keeping the queue's other settings), and one row per
 * stock shard when the goods has them.
 */
export class QueuePanel {
  private mode: Mode = 'off';
  private settings: Record<string, unknown> = {};
  private busy = false;
  private trustUntil = 0;
  private last: Stats | undefined;

  constructor(
    private readonly ctx: AdminContext,
    private readonly root: HTMLElement,
    private readonly goodsId: number,
    private readonly field: (name: string) => HTMLElement,
  ) {
    for (const button of this.buttons()) {
      button.addEventListener('click', () => void this.switchTo(button.dataset.mode));
    }
  }

  render(s: Stats | undefined): void {
    const { i18n } = this.ctx;
    this.last = s;
    const q = s?.queue;
    const trusted = this.busy || Date.now() < this.trustUntil;
    if (!trusted) {
      if (s?.queueSettings && isMode(s.queueSettings.mode)) {
        this.settings = s.queueSettings;
      }
      const mode = s?.queueSettings?.mode ?? q?.mode;
      this.mode = isMode(mode) ? mode : this.mode;
    }
    const on = q !== undefined && q !== null && q.mode !== 'off';
    this.field('queueFigures').hidden = !on;
    const active = this.field('queueActive');
    active.hidden = !on || q?.active === undefined;
    active.textContent = i18n.t(q?.active ? 'queueActive' : 'queueIdle');
    active.dataset.state = String(Boolean(q?.active));
    this.field('queueWaiting').textContent = formatCount(q?.waiting, i18n.locale);
    this.field('queueRate').textContent = formatCount(q?.admittedPerSecond, i18n.locale);
    this.field('queueLastEta').textContent =
      q?.lastEtaSeconds === undefined ? '–' : i18n.t('queueSeconds', { s: Math.round(q.lastEtaSeconds) });
    // Shards well below the count while shoppers wait: shards that cannot reach the coordinator (the line holds).
    this.field('queueShards').textContent =
      q?.shards === undefined
        ? '–'
        : i18n.t('queueShardsOf', { reporting: formatCount(q.shardsReporting, i18n.locale), shards: formatCount(q.shards, i18n.locale) });
    // The delays the room's ETAs take, as its coordinator measured them lately (docs/waiting-room.md).
    this.field('queueFrontLag').textContent = this.delay(q?.frontLagMs);
    this.field('queueLate').textContent = this.delay(q?.lateMs);
    for (const button of this.buttons()) {
      button.setAttribute('aria-pressed', String(button.dataset.mode === this.mode));
      button.setAttribute('aria-disabled', String(this.busy));
    }
    this.renderShards(s);
  }

  private delay(ms: number | null | undefined): string {
    const { i18n } = this.ctx;
    const d = formatDelay(ms, i18n.locale);
    if (!d) {
      return '–';
    }
    return d.unit === 'ms' ? i18n.t('queueMilliseconds', { ms: d.value }) : i18n.t('queueSeconds', { s: d.value });
  }

  private renderShards(s: Stats | undefined): void {
    const { i18n } = this.ctx;
    const shards = s?.shards ?? [];
    // One shard is the goods' object itself: the stock table above says it all.
    this.field('shardsBox').hidden = shards.length <= 1;
    this.field('shardRows').replaceChildren(
      ...shards.map((shard) => {
        const row = el('tr');
        const th = el('th', '', `#${shard.shard}`);
        th.scope = 'row';
        row.append(
          th,
          el('td', 'num', formatCount(shard.remaining, i18n.locale)),
          el('td', 'num', formatCount(shard.queued, i18n.locale)),
          el('td', 'num', formatCount(shard.confirmed, i18n.locale)),
        );
        return row;
      }),
    );
  }

  private async switchTo(mode: string | undefined): Promise<void> {
    if (this.busy || !isMode(mode) || mode === this.mode) {
      return;
    }
    this.busy = true;
    const before = this.mode;
    this.mode = mode;
    this.render(this.last);
    try {
      const res = await adminJson(this.ctx, `/admin/goods/${this.goodsId}`, Echo, {
        method: 'PUT',
        body: { queue: { ...this.settings, mode } },
      });
      if (!res.ok) {
        this.mode = before;
        this.ctx.say(this.ctx.i18n.t('failed', { message: res.message }));
        return;
      }
      const echoed = res.data.queue;
      if (echoed && isMode(echoed.mode)) {
        this.settings = echoed;
        this.mode = echoed.mode;
      }
      this.trustUntil = Date.now() + SWITCH_TRUST_MS;
      this.ctx.say(this.ctx.i18n.t('queueModeSet', { id: this.goodsId, mode: this.ctx.i18n.t(`queueMode${this.mode}`) }));
    } finally {
      this.busy = false;
      this.render(this.last);
    }
  }

  private buttons(): HTMLButtonElement[] {
    return [...this.root.querySelectorAll<HTMLButtonElement>('button[data-mode]')];
  }
}
