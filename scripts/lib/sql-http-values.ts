// Values across Neon's SQL-over-HTTP endpoint (sql-http.ts): JSON parameters in as Postgres
// text, the way Neon converts them; rows out as Postgres text (Neon-Raw-Text-Output, the
// driver parses them by type OID) or as JSON for clients that do not ask for raw text.
import type pg from 'pg';

/** Parameter values as the request body may carry them. */
export type JsonValue = string | number | boolean | null | JsonValue[] | { [key: string]: JsonValue };
/** A value of a JSON answer: raw text, or a converted value. */
type Cell = JsonValue | undefined;

export type Field = {
  name: string;
  dataTypeID: number;
  tableID: number;
  columnID: number;
  dataTypeSize: number;
  dataTypeModifier: number;
  format: 'text';
};

/** One statement's answer as Neon sends it. */
export type ResultJson = {
  command: string;
  rowCount: number | null;
  rows: Cell[][] | Record<string, Cell>[];
  fields: Field[];
  rowAsArray: boolean;
};

/** Element type of the array types JSON output understands (others stay text). */
const ARRAY_ELEMENT: Record<number, number> = {
  1000: 16, // bool
  1005: 21, // int2
  1007: 23, // int4
  1016: 20, // int8
  1021: 700, // float4
  1022: 701, // float8
  1231: 1700, // numeric
  199: 114, // json
  3807: 3802, // jsonb
  1009: 25, // text
  1015: 1043, // varchar
  1014: 1042, // bpchar
  1115: 1114, // timestamp
  1185: 1184, // timestamptz
  1182: 1082, // date
  2951: 2950, // uuid
};

/** A JSON parameter as Postgres text, the way Neon converts it. */
export function paramText(value: unknown): string | null {
  if (value === null || value === undefined) {
    return null;
  }
  if (typeof value === 'string') {
    return value;
  }
  if (Array.isArray(value)) {
    return arrayLiteral(value);
  }
  return JSON.stringify(value);
}

function arrayLiteral(value: unknown): string {
  if (value === null) {
    return 'NULL';
  }
  if (Array.isArray(value)) {
    return `{${value.map(arrayLiteral).join(',')}}`;
  }
  // Inside an array literal strings (and objects, as JSON text) are quoted and escaped.
  const text = typeof value === 'object' ? JSON.stringify(value) : String(value);
  return typeof value === 'string' || typeof value === 'object' ? JSON.stringify(text) : text;
}

/** Postgres text as JSON, for clients that do not ask for raw text. */
function textToJson(text: string, oid: number): JsonValue {
  const element = ARRAY_ELEMENT[oid];
  if (element !== undefined) {
    return parseArray(text, element);
  }
  switch (oid) {
    case 16:
      return text === 't';
    case 21:
    case 23:
      return Number.parseInt(text, 10);
    case 700:
    case 701: {
      const n = Number(text);
      // NaN and the infinities stay strings, as JSON has no numbers for them.
      return Number.isFinite(n) ? n : text;
    }
    case 114:
    case 3802: {
      const parsed: JsonValue = JSON.parse(text);
      return parsed;
    }
    default:
      return text;
  }
}

/** Parses an array's text form (`{1,2,NULL}`, `{{"a b",c}}`, `[0:1]={...}`). */
function parseArray(text: string, elementOid: number): JsonValue[] {
  let i = text.startsWith('[') ? text.indexOf('=') + 1 : 0;
  const parse = (): JsonValue[] => {
    const out: JsonValue[] = [];
    i++; // '{'
    if (text[i] === '}') {
      i++;
      return out;
    }
    for (;;) {
      if (text[i] === '{') {
        out.push(parse());
      } else if (text[i] === '"') {
        let s = '';
        for (i++; text[i] !== '"'; i++) {
          if (text[i] === '\\') {
            i++;
          }
          s += text[i];
        }
        i++;
        out.push(textToJson(s, elementOid));
      } else {
        const end = text.slice(i).search(/[,}]/) + i;
        const item = text.slice(i, end).trim();
        out.push(item === 'NULL' ? null : textToJson(item, elementOid));
        i = end;
      }
      if (text[i] === ',') {
        i++;
        continue;
      }
      i++; // '}'
      return out;
    }
  };
  return parse();
}

/** A statement's result (rows as arrays of raw text) in Neon's answer shape. */
export function resultJson(
  result: pg.QueryArrayResult<(string | null)[]>,
  { arrayMode, rawText }: { arrayMode: boolean; rawText: boolean },
): ResultJson {
  const fields: Field[] = result.fields.map((f) => ({
    name: f.name,
    dataTypeID: f.dataTypeID,
    tableID: f.tableID,
    columnID: f.columnID,
    dataTypeSize: f.dataTypeSize,
    dataTypeModifier: f.dataTypeModifier,
    format: 'text',
  }));
  const value = (v: string | null, i: number): Cell => {
    if (rawText || v === null) {
      return v;
    }
    const field = fields[i];
    return field ? textToJson(v, field.dataTypeID) : v;
  };
  const rows = arrayMode
    ? result.rows.map((row) => row.map(value))
    : result.rows.map((row) => {
        const out: Record<string, Cell> = {};
        row.forEach((v, i) => {
          out[fields[i]?.name ?? String(i)] = value(v, i);
        });
        return out;
      });
  return { command: result.command ?? '', rowCount: result.rowCount ?? null, rows, fields, rowAsArray: arrayMode };
}
