// query.mjs runs one SQL statement in an in-memory DuckDB and prints the rows as a JSON array
// on stdout. The Go tests use it to read llmreplay's Parquet files with an independent engine:
//   node testdata/duckdb/query.mjs "SELECT count(*) AS n FROM 'x.parquet'"
// BIGINT and DECIMAL values come back as JSON strings (getRowObjectsJson), so callers parse them.
import { DuckDBInstance } from '@duckdb/node-api';

const sql = process.argv[2];
if (!sql) {
  console.error('usage: node query.mjs SQL');
  process.exit(2);
}
try {
  const instance = await DuckDBInstance.create(':memory:');
  const conn = await instance.connect();
  const reader = await conn.runAndReadAll(sql);
  process.stdout.write(JSON.stringify(reader.getRowObjectsJson()));
} catch (err) {
  console.error(String(err && err.message ? err.message : err));
  process.exit(1);
}
