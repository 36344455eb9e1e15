// The graphql-http audit (every MUST and SHOULD of GraphQL over HTTP) against a live server.
// Usage: node audit.mjs URL TOKEN. Prints a table and a JSON summary line; exits 1 when an
// audit is not ok.
import { auditServer } from 'graphql-http';

const [url, token] = process.argv.slice(2);
const fetchFn = (input, init = {}) => {
  const headers = new Headers(init.headers || {});
  headers.set('authorization', `Bearer ${token}`);
  return fetch(input, { ...init, headers });
};
const results = await auditServer({ url, fetchFn });
const counts = {};
const rows = [];
for (const result of results) {
  const level = result.name.split(' ')[0];
  counts[level] ??= { ok: 0, total: 0 };
  counts[level].total += 1;
  if (result.status === 'ok') counts[level].ok += 1;
  const reason = result.status === 'ok' ? '' : ` -- ${result.reason}`;
  rows.push(`| ${result.status.padEnd(7)} | ${result.id} | ${result.name}${reason} |`);
}
console.log('| status  | id   | audit |');
console.log('|---------|------|-------|');
for (const row of rows) console.log(row);
console.log(JSON.stringify({ counts }));
process.exit(results.every((r) => r.status === 'ok') ? 0 : 1);
