// Drives the console in headless Chromium (Debian's) through playwright-core, step by step with the test
// that runs it: it prints "step NAME ..." lines, and where the test must act (a failover) it prints
// "wait NAME" and reads a line from stdin before it goes on. Screenshots go to the folder it is given.
//   node console.mjs URL TOKEN SCREENSHOT_DIR STREAM GROUP
import { chromium } from "playwright-core";
import { createInterface } from "node:readline";
import { existsSync } from "node:fs";

const [url, token, shots, stream, group] = process.argv.slice(2);
const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
const say = (text) => process.stdout.write(`${text}\n`);
const executablePath = ["/usr/lib/chromium/chromium", "/usr/bin/chromium"].find((p) => existsSync(p));

const browser = await chromium.launch({ executablePath, headless: true, args: ["--no-sandbox", "--disable-dev-shm-usage"] });
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  page.on("pageerror", (err) => say(`pageerror ${err.message}`));
  page.setDefaultTimeout(20_000);

  // sign in: the console asks for a token before anything else
  await page.goto(url);
  await page.waitForSelector("#login");
  await page.screenshot({ path: `${shots}/login.png` });
  await page.fill("#token", token);
  await page.click("#login button");
  await page.waitForSelector("[data-cluster]");
  say(`step fleet clusters=${await page.locator("[data-cluster]").count()}`);
  await page.screenshot({ path: `${shots}/fleet.png`, fullPage: true });

  // a stream's timeline updates in place when the lane fails over
  await page.goto(`${url}#/stream/${stream}`);
  await page.waitForSelector('[data-generation="realtime/1"][data-state="active"]');
  await page.waitForSelector("#live.on");
  await page.evaluate(() => { window.__sameDocument = true; });
  await page.screenshot({ path: `${shots}/stream-before.png`, fullPage: true });
  say("wait failover");
  await lines.next();
  await page.waitForSelector('[data-generation="realtime/2"][data-state="active"]');
  await page.waitForSelector('[data-generation="realtime/1"]:not([data-state="active"])');
  const same = await page.evaluate(() => window.__sameDocument === true);
  const old = await page.getAttribute('[data-generation="realtime/1"]', "data-state");
  say(`step timeline reloaded=${!same} g1=${old}`);
  await page.screenshot({ path: `${shots}/stream-after.png`, fullPage: true });

  // a group's time-lag chart moves as samples arrive
  await page.goto(`${url}#/group/${group}`);
  await page.waitForSelector('svg[data-chart="lanes"]');
  const points = async () => Number(await page.getAttribute('svg[data-chart="lanes"]', "data-points"));
  const first = await points();
  await page.waitForFunction(
    (n) => Number(document.querySelector('svg[data-chart="lanes"]')?.getAttribute("data-points")) >= n + 3,
    first,
  );
  const max = Number(await page.getAttribute('svg[data-chart="lanes"]', "data-max"));
  say(`step chart first=${first} now=${await points()} max_ms=${max}`);
  await page.screenshot({ path: `${shots}/group.png`, fullPage: true });

  // the event log filters by kind and by stream
  await page.goto(`${url}#/events`);
  await page.waitForSelector("tr.event");
  const all = await page.locator("tr.event").count();
  await page.fill('input[name="kind"]', "failed_over");
  await page.click("#filters button");
  await page.waitForFunction(() => {
    const rows = [...document.querySelectorAll("tr.event")];
    return rows.length > 0 && rows.every((r) => r.dataset.kind === "failed_over");
  });
  const failovers = await page.locator("tr.event").count();
  say(`step events all=${all} failed_over=${failovers}`);
  await page.screenshot({ path: `${shots}/events.png`, fullPage: true });

  // an operator action asks first, saying what will move; cancelling moves nothing
  await page.goto(`${url}#/fleet`);
  await page.click("[data-freeze]");
  await page.waitForSelector("#confirm[open] #confirm-moves li");
  const moves = await page.locator("#confirm-moves li").allTextContents();
  await page.screenshot({ path: `${shots}/confirm.png` });
  await page.click('#confirm button[value="cancel"]');
  await page.waitForSelector("#confirm:not([open])", { state: "hidden" });
  say(`step confirm moves=${JSON.stringify(moves)} policy=${await page.textContent("#fleet-policy")}`);
  say("done");
} finally {
  await browser.close();
}
