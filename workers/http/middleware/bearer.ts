/** The token of an `Authorization: Bearer <token>` header (printable ASCII, at most 4 KiB). */
export function bearer(header: string | undefined): string | undefined {
  const m = header?.match(/^Bearer ([\x21-\x7e]{1,4096})$/);
  return m?.[1];
}
