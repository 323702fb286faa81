import { callJson } from '../shared/api';
import { Eligibility } from '../shared/contract';
import { byId } from '../shared/dom';
import type { ShopperContext } from './context';
import type { GoodsView } from './goods-view';

/** Units offered in the picker at most, whatever the limit (the contract caps perUserLimit at 100). */
const MAX_PICK = 100;

/** How many units a shopper may still pick: the goods' limit less what they already hold. */
export function pickable(perUserLimit: number | undefined, held: number | undefined): number {
  const limit = Math.min(MAX_PICK, Math.max(1, Math.floor(perUserLimit ?? 1)));
  return Math.max(1, limit - Math.max(0, Math.floor(held ?? 0)));
}

/**
 * The sale's rules on the page: a quantity picker when a shopper may hold more than one unit,
 * and, for an allowlist sale, whether this shopper is on the list (asked once per shopper).
 * A goods without these fields shows nothing of it.
 */
export class RulesView {
  private checked: string | undefined;
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

  /** Units to buy, when the goods lets a shopper pick (undefined: send no quantity). */
  quantity(): number | undefined {
    if ((this.view.goods?.perUserLimit ?? 1) <= 1) {
      return undefined;
    }
    const n = Number(this.els.quantity.value);
    return Number.isInteger(n) && n >= 1 ? n : 1;
  }

  /** True when the server said this shopper is not on the sale's list. */
  blocked(): boolean {
    return this.view.goods?.eligibility === 'allowlist' && this.eligible === false;
  }

  /** A purchase answered NOT_ELIGIBLE: remember it without asking again. */
  markNotEligible(): void {
    this.eligible = false;
    this.render();
  }

  update(): void {
    const g = this.view.goods;
    const session = this.ctx.session();
    if (g?.eligibility === 'allowlist' && session && this.checked !== session.userId) {
      this.checked = session.userId;
      this.eligible = undefined;
      void this.check(session.userId, session.token);
    }
    if (!session) {
      this.checked = undefined;
      this.eligible = undefined;
      this.held = undefined;
    }
    this.render();
  }

  private async check(userId: string, token: string): Promise<void> {
    const res = await callJson(`/api/seckill/goods/${this.view.goodsId}/eligibility`, Eligibility, { auth: token });
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
    const limit = g?.perUserLimit ?? 1;
    const max = pickable(limit, this.held);
    this.els.row.hidden = limit <= 1 || this.blocked();
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
    this.els.hint.textContent = limit > 1 ? i18n.t('limitLeft', { n: limit }) : '';
    this.els.eligibility.hidden = !this.blocked();
    this.els.eligibility.textContent = this.blocked() ? i18n.t('notEligible') : '';
  }
}
