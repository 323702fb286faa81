import { callJson } from '../shared/api';
import { Eligibility } from '../shared/contract';
import { byId } from '../shared/dom';
import type { ShopperContext } from './context';
import type { GoodsView } from './goods-view';

/** Units offered in the picker at most, whatever the limit (the contract caps perUserLimit at 100). */
const MAX_PICK = 100;

/** How many units a shopper may still pick: the goods' limit less what they already hold, within what is left. */
export function pickable(perUserLimit: number | undefined, held: number | undefined, remaining?: number): number {
  const limit = Math.min(MAX_PICK, Math.max(1, Math.floor(perUserLimit ?? 1)));
  const left = limit - Math.max(0, Math.floor(held ?? 0));
  return Math.max(1, remaining === undefined ? left : Math.min(left, Math.floor(remaining)));
}

/**
 * The sale's rules on the page: a quantity picker when a shopper may hold more than one unit
 * (less the units they hold already), and, for an allowlist sale, whether this shopper is on
 * the list. Both come from the eligibility route, asked once per shopper and again when their
 * order changes. A goods without these fields shows nothing of it.
 */
export class RulesView {
  private checked: string | undefined;
  /** The next check follows the shopper's own order change: asked of Postgres, not the edge's copies a second behind it. */
  private fresh = false;
  private eligible: boolean | undefined;
  private held: number | undefined;
  private readonly els = {
    row: byId('quantity-row', HTMLElement),
    quantity: byId('quantity', HTMLSelectElement),
    hint: byId('quantity-hint', HTMLElement),
    eligibility: byId('eligibility', HTMLElement),
  };

  constructor(
    private readonly ctx: ShopperContext,
    private readonly view: GoodsView,
    private readonly onChange: () => void,
  ) {}

  private limit(): number {
    return this.view.goods?.perUserLimit ?? 1;
  }

  /** Units to buy, when the goods lets a shopper pick (undefined: send no quantity). */
  quantity(): number | undefined {
    if (this.limit() <= 1) {
      return undefined;
    }
    const n = Number(this.els.quantity.value);
    return Number.isInteger(n) && n >= 1 ? n : 1;
  }

  /** True when the server said this shopper is not on the sale's list, or holds all they may. */
  blocked(): boolean {
    return (this.view.goods?.eligibility === 'allowlist' && this.eligible === false) || this.full();
  }

  /** True when a shopper holding a live order may still buy more units of this goods. */
  moreAllowed(): boolean {
    return this.limit() > 1 && !this.full();
  }

  private full(): boolean {
    return this.limit() > 1 && this.held !== undefined && this.held >= this.limit();
  }

  /** A purchase answered NOT_ELIGIBLE: remember it without asking again. */
  markNotEligible(): void {
    this.eligible = false;
    this.render();
  }

  /** The shopper's order changed (placed, read, cancelled) or a purchase hit the limit: ask again what they hold. */
  recount(): void {
    this.checked = undefined;
    this.fresh = true;
    this.update();
  }

  update(): void {
    const g = this.view.goods;
    const session = this.ctx.session();
    const asks = g?.eligibility === 'allowlist' || this.limit() > 1;
    if (asks && session && this.checked !== session.userId) {
      this.checked = session.userId;
      void this.check(session.userId, session.token, this.fresh);
      this.fresh = false;
    }
    if (!session) {
      this.checked = undefined;
      this.eligible = undefined;
      this.held = undefined;
    }
    this.render();
  }

  private async check(userId: string, token: string, fresh: boolean): Promise<void> {
    const query = fresh ? '?fresh=1' : '';
    const res = await callJson(`/api/seckill/goods/${this.view.goodsId}/eligibility${query}`, Eligibility, { auth: token });
    if (this.ctx.session()?.userId !== userId) {
      return;
    }
    if (res.ok) {
      this.eligible = res.data.eligible;
      this.held = res.data.held;
    } else {
      // Unknown here (an older server, a passing failure): the purchase route still decides.
      this.checked = res.status === 0 || res.status >= 500 ? undefined : userId;
    }
    this.render();
    this.onChange();
  }

  private render(): void {
    const { i18n } = this.ctx;
    const g = this.view.goods;
    const limit = this.limit();
    const max = pickable(limit, this.held, g?.remaining);
    const listedOut = g?.eligibility === 'allowlist' && this.eligible === false;
    this.els.row.hidden = limit <= 1 || listedOut;
    this.els.quantity.hidden = this.full();
    if (this.els.quantity.options.length !== max) {
      const picked = this.els.quantity.value;
      this.els.quantity.replaceChildren(
        ...Array.from({ length: max }, (_, i) => {
          const option = document.createElement('option');
          option.value = String(i + 1);
          option.textContent = String(i + 1);
          return option;
        }),
      );
      this.els.quantity.value = Number(picked) <= max ? picked : '1';
    }
    const held = this.held ?? 0;
    this.els.hint.textContent =
      limit <= 1 ? '' : this.full() ? i18n.t('limitFull', { n: limit }) : i18n.t(held > 0 ? 'limitHeld' : 'limitLeft', { n: limit, held });
    this.els.eligibility.hidden = !listedOut;
    this.els.eligibility.textContent = listedOut ? i18n.t('notEligible') : '';
  }
}
