// A reverse proxy for `scripts/conformance --gateway`: the conformance suite's client cannot send
// an `Authorization` header, so this adds the bearer token in front of the gateway's `/mcp`, and
// passes everything else through as it comes (the `Host` and `Origin` the suite sends, streamed
// bodies both ways). It listens on 127.0.0.1 and a free port, prints `listening on
// http://127.0.0.1:PORT` once bound, and reads the token and the gateway's base URL from the
// files named on its command line at each request (the gateway starts after it: its public URL
// is this proxy's). Until the target file exists it answers 503.
//
//   node scripts/conformance-proxy.mjs TOKEN_FILE TARGET_FILE
import fs from 'node:fs';
import http from 'node:http';

const [tokenFile, targetFile] = process.argv.slice(2);
if (!tokenFile || !targetFile) {
  console.error('usage: conformance-proxy.mjs TOKEN_FILE TARGET_FILE');
  process.exit(2);
}

const read = (file) => {
  try {
    return fs.readFileSync(file, 'utf8').trim();
  } catch {
    return '';
  }
};

const server = http.createServer((request, response) => {
  const target = read(targetFile);
  const token = read(tokenFile);
  if (!target || !token) {
    response.writeHead(503, { 'content-type': 'text/plain' });
    response.end('the gateway is not up yet\n');
    return;
  }
  const url = new URL(target);
  const headers = { ...request.headers, authorization: `Bearer ${token}` };
  const forwarded = http.request(
    { host: url.hostname, port: url.port, method: request.method, path: request.url, headers },
    (answer) => {
      response.writeHead(answer.statusCode ?? 502, answer.headers);
      answer.pipe(response);
    }
  );
  forwarded.on('error', (e) => {
    if (!response.headersSent) response.writeHead(502, { 'content-type': 'text/plain' });
    response.end(`proxy: ${e.message}\n`);
  });
  // A client that goes away ends the gateway's side too (a stream it stopped reading).
  response.on('close', () => forwarded.destroy());
  request.pipe(forwarded);
});

server.listen(0, '127.0.0.1', () => {
  console.log(`listening on http://127.0.0.1:${server.address().port}`);
});
