// axe-core in headless Chromium, and the page width on a phone, for each HTML file given:
//   node axe_pages.cjs [--width 390] PAGE.html ...  ->  JSON {page: {violations: [...], scroll_width, viewport}}
// Chromium is the system's (CHROMIUM or /usr/bin/chromium); pages are opened from file://.
'use strict';
const fs = require('fs');
const path = require('path');
const puppeteer = require('puppeteer-core');

async function main() {
  const args = process.argv.slice(2);
  let width = 390;
  const wi = args.indexOf('--width');
  if (wi >= 0) { width = Number(args[wi + 1]); args.splice(wi, 2); }
  const axeSource = fs.readFileSync(require.resolve('axe-core/axe.min.js'), 'utf8');
  const browser = await puppeteer.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--no-first-run'],
  });
  const out = {};
  try {
    for (const file of args) {
      const page = await browser.newPage();
      await page.setViewport({ width, height: 844, deviceScaleFactor: 1, isMobile: true, hasTouch: true });
      await page.goto('file://' + path.resolve(file), { waitUntil: 'load' });
      await page.addScriptTag({ content: axeSource });
      const violations = await page.evaluate(async () => {
        const r = await window.axe.run(document, { resultTypes: ['violations'] });
        return r.violations.map((v) => ({ id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.slice(0, 5).map((n) => n.target.join(' ')), count: v.nodes.length }));
      });
      const scrollWidth = await page.evaluate(() => Math.max(document.documentElement.scrollWidth, document.body.scrollWidth));
      out[file] = { violations, scroll_width: scrollWidth, viewport: width };
      await page.close();
    }
  } finally {
    await browser.close();
  }
  process.stdout.write(JSON.stringify(out, null, 1));
}
main().catch((e) => { process.stderr.write(String(e && e.stack || e) + '\n'); process.exit(1); });
