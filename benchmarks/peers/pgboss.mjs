// make bench's pg-boss peer: N jobs, each `send`, then `fetch` + `complete`, 16 at a time.
//
//   node pgboss.mjs <connection string> <jobs> <concurrency>
//
// Prints one JSON line: jobs per second for the whole job (send, fetch, complete: the
// counterpart of our claim → markSendStarted → finalize), and for each half. pg-boss
// creates its schema in the database given (make bench creates it and drops it after).
import { PgBoss } from "pg-boss";

const [url, jobsArg, concurrencyArg] = process.argv.slice(2);
const jobs = Number(jobsArg);
const concurrency = Number(concurrencyArg);
const queue = "bench";

const boss = new PgBoss({
  connectionString: url,
  max: concurrency,
  schedule: false,
  supervise: false,
});
boss.on("error", (error) => {
  console.error(error);
  process.exitCode = 1;
});
await boss.start();
if (!(await boss.getQueue(queue))) await boss.createQueue(queue);

async function inParallel(count, task) {
  let next = 0;
  const worker = async () => {
    while (next < count) {
      next += 1;
      await task();
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
}

const send = () => boss.send(queue, { payload: "bench" });
let completed = 0;
async function fetchAndComplete() {
  for (;;) {
    const [job] = await boss.fetch(queue, { batchSize: 1 });
    if (job === undefined) throw new Error("the queue ran dry before every job was fetched");
    await boss.complete(queue, job.id);
    completed += 1;
    return;
  }
}

// Warm-up: a few jobs through both halves, not timed.
for (let i = 0; i < 5; i += 1) await send();
for (let i = 0; i < 5; i += 1) await fetchAndComplete();
completed = 0;

const t0 = performance.now();
await inParallel(jobs, send);
const t1 = performance.now();
await inParallel(jobs, fetchAndComplete);
const t2 = performance.now();
await boss.stop({ graceful: false, close: true });
if (completed !== jobs) throw new Error(`completed ${completed} of ${jobs}`);
console.log(
  JSON.stringify({
    jobs,
    concurrency,
    jobs_per_s: (jobs * 1000) / (t2 - t0),
    send_per_s: (jobs * 1000) / (t1 - t0),
    fetch_complete_per_s: (jobs * 1000) / (t2 - t1),
  }),
);
