// A page's texts in English and Chinese. The language comes from a saved choice, else from
// the browser's preferred languages; a toggle switches and remembers it.

export type Lang = 'en' | 'zh';
export type Dictionary<K extends string> = Record<K, string>;

const STORAGE_KEY = 'seckill:lang';

/** Picks the language: a saved choice wins, then the first supported browser language. */
export function pickLang(saved: string | null, preferred: readonly string[]): Lang {
  if (saved === 'en' || saved === 'zh') {
    return saved;
  }
  for (const tag of preferred) {
    const base = tag.toLowerCase().split('-')[0];
    if (base === 'zh') {
      return 'zh';
    }
    if (base === 'en') {
      return 'en';
    }
  }
  return 'en';
}

/** Replaces `{name}` placeholders. */
export function interpolate(text: string, vars: Record<string, string | number> = {}): string {
  return text.replace(/\{(\w+)\}/g, (whole, name: string) => (name in vars ? String(vars[name]) : whole));
}

function savedLang(): string | null {
  try {
    return localStorage.getItem(STORAGE_KEY);
  } catch {
    // Storage can be disabled (private mode, policies): fall back to the browser's languages.
    return null;
  }
}

export class I18n<K extends string> {
  lang: Lang;
  private readonly listeners: Array<() => void> = [];

  constructor(private readonly dictionaries: Record<Lang, Dictionary<K>>) {
    this.lang = pickLang(savedLang(), navigator.languages?.length ? navigator.languages : [navigator.language]);
  }

  /** The text for `key` in the current language. */
  t(key: K, vars?: Record<string, string | number>): string {
    return interpolate(this.dictionaries[this.lang][key], vars);
  }

  /** The BCP 47 tag for number, money and date formatting. */
  get locale(): string {
    return this.lang === 'zh' ? 'zh-CN' : 'en-US';
  }

  set(lang: Lang): void {
    this.lang = lang;
    try {
      localStorage.setItem(STORAGE_KEY, lang);
    } catch {
      // Not remembered across visits; the switch still applies now.
    }
    this.apply(document);
    for (const listener of this.listeners) {
      listener();
    }
  }

  /** Runs `listener` after every language switch (to re-render dynamic texts). */
  onChange(listener: () => void): void {
    this.listeners.push(listener);
  }

  /**
   * Fills static texts: `data-i18n="key"` sets the text, `data-i18n-attr="attr:key;attr:key"`
   * sets attributes (labels, placeholders).
   */
  apply(root: ParentNode): void {
    document.documentElement.lang = this.lang === 'zh' ? 'zh-CN' : 'en';
    for (const el of root.querySelectorAll<HTMLElement>('[data-i18n]')) {
      const key = el.dataset.i18n;
      if (key && this.has(key)) {
        el.textContent = this.t(key);
      }
    }
    for (const el of root.querySelectorAll<HTMLElement>('[data-i18n-attr]')) {
      for (const pair of (el.dataset.i18nAttr ?? '').split(';')) {
        const [attr, key] = pair.split(':');
        if (attr && key && this.has(key)) {
          el.setAttribute(attr.trim(), this.t(key));
        }
      }
    }
  }

  /** Wires a button that switches to the other language. */
  bindToggle(button: HTMLButtonElement): void {
    const label = () => {
      // The button names the language it switches TO, in that language.
      button.textContent = this.lang === 'zh' ? 'English' : '中文';
      button.lang = this.lang === 'zh' ? 'en' : 'zh-CN';
    };
    label();
    button.addEventListener('click', () => {
      this.set(this.lang === 'zh' ? 'en' : 'zh');
      label();
    });
  }

  private has(key: string): key is K {
    return key in this.dictionaries[this.lang];
  }
}
