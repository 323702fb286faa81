// Small DOM helpers. The pages are hand-written HTML; scripts look elements up by id once.

/** The element with `id`, checked to be of the expected kind (a missing one is a page bug). */
export function byId<T extends HTMLElement>(id: string, kind: new () => T): T {
  const el = document.getElementById(id);
  if (!(el instanceof kind)) {
    throw new Error(`page element #${id} is missing or not a ${kind.name}`);
  }
  return el;
}

export function show(el: HTMLElement, visible: boolean): void {
  el.hidden = !visible;
}

/** Creates an element with a class and text, for the few lists the pages build. */
export function el<K extends keyof HTMLElementTagNameMap>(tag: K, className = '', text = ''): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  if (className) {
    node.className = className;
  }
  if (text) {
    node.textContent = text;
  }
  return node;
}

/**
 * A button that looks and acts disabled but keeps keyboard focus (the `disabled`
 * attribute would drop focus to the page and lose the screen reader's place).
 */
export function setBusy(button: HTMLButtonElement, busy: boolean): void {
  button.setAttribute('aria-disabled', String(busy));
  button.classList.toggle('is-busy', busy);
}

export function isBusy(button: HTMLButtonElement): boolean {
  return button.getAttribute('aria-disabled') === 'true';
}

/** Reads a value from localStorage, or undefined when storage is unavailable. */
export function loadLocal(key: string): string | undefined {
  try {
    return localStorage.getItem(key) ?? undefined;
  } catch {
    return undefined;
  }
}

export function saveLocal(key: string, value: string | undefined): void {
  try {
    if (value === undefined) {
      localStorage.removeItem(key);
    } else {
      localStorage.setItem(key, value);
    }
  } catch {
    // Without storage the page still works; a reload just forgets the pending purchase.
  }
}

/** Whether the user asked for less motion (spinners become static, bars stop animating). */
export function reducedMotion(): boolean {
  return window.matchMedia?.('(prefers-reduced-motion: reduce)').matches ?? false;
}
