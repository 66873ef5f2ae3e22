"""A fixed corpus of real-looking logs for the log tables' tests and `logport bench logs`.

About 230 message templates in the words of real software (nginx, Rails, Spring/Java, Go services, Python
apps, Kubernetes components, journald, syslog daemons), each with variable fields (numbers, ids, IPs, paths,
durations, user names, quoted strings), shipped as those programs' shippers ship them: Fluent Bit over Forward
(`log` lines of containers with `stream` and `kubernetes.host`, journald fields, syslog `pri`, JSON loggers'
records), Filebeat over Lumberjack (`message`, ECS `host.name`, `log.level` nested or dotted) and Go services
writing JSON lines over the segment protocol (opaque events). Each message knows its template and the level a
reader should get from it, so the tests measure the grouping and the level extraction against the truth.
"""

from __future__ import annotations

import random
import re
import string
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import orjson

from logport.batch import encode_batch

BASE_S = 1_795_000_000  # 2026-11-18T11:06:40Z, the Spark tests' fixed day

USERS = ["alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy", "mallory", "niaj",
         "olivia", "peggy", "rupert", "sybil", "trent", "victor", "walter", "deploy", "jenkins", "admin", "ubuntu"]
WORDS = ["orders", "invoices", "payments", "users", "carts", "sessions", "catalog", "search", "images", "exports",
         "reports", "audit", "billing", "shipping", "inventory", "reviews", "coupons", "notifications"]
HOSTS = ["api.example.com", "shop.example.com", "cdn.example.net", "auth.internal", "db-primary.internal",
         "cache.internal", "search.example.com", "mail.example.org", "static.example.com"]
NODES = ["ip-10-0-1-17.ec2.internal", "ip-10-0-2-41.ec2.internal", "ip-10-0-3-9.ec2.internal",
         "gke-prod-pool-1-8f3a2b1c-x2k4", "gke-prod-pool-1-8f3a2b1c-m9p1"]
NAMESPACES = ["default", "shop", "payments", "kube-system", "monitoring", "ingress-nginx"]
METHODS = ["GET", "GET", "GET", "POST", "PUT", "DELETE", "PATCH"]
STATUSES = ["200", "200", "200", "201", "204", "301", "304", "400", "401", "403", "404", "500", "502", "503"]
AGENTS = ["Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0 Safari/537.36",
          "Mozilla/5.0 (iPhone; CPU iPhone OS 17_1 like Mac OS X) AppleWebKit/605.1.15 Mobile/15E148",
          "curl/8.4.0", "kube-probe/1.28", "Go-http-client/1.1", "python-requests/2.31.0",
          "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"]
PHRASES = ["out of stock", "card declined", "address not verified", "rate limit reached", "duplicate request",
           "missing permission", "quota exceeded for today", "upstream unavailable"]
CONTROLLERS = ["OrdersController#index", "OrdersController#show", "CartsController#update", "UsersController#create",
               "SessionsController#new", "Admin::ReportsController#export", "Api::V2::ProductsController#search"]
TASKS = ["shop.tasks.send_receipt", "shop.tasks.sync_inventory", "billing.tasks.charge_subscription",
         "reports.tasks.render_pdf", "search.tasks.reindex_product"]
UNITS = ["logrotate.service", "apt-daily.service", "certbot.service", "node-exporter.service", "backup.service",
         "fstrim.service", "docker.service", "kubelet.service"]


def _hex(rng: random.Random, n: int) -> str:
    return "".join(rng.choice("0123456789abcdef") for _ in range(n))


def _ip(rng: random.Random) -> str:
    return f"{rng.choice([10, 172, 192, 203, 91])}.{rng.randrange(256)}.{rng.randrange(256)}.{rng.randrange(1, 255)}"


def _path(rng: random.Random) -> str:
    resource = rng.choice(WORDS)
    return rng.choice([f"/api/v1/{resource}/{rng.randrange(1, 99999)}", f"/api/v2/{resource}",
                       f"/{resource}/{rng.randrange(1, 999)}/edit", f"/static/{_hex(rng, 8)}.js",
                       f"/{resource}?page={rng.randrange(1, 40)}", "/healthz", "/"])


def _file(rng: random.Random) -> str:
    return rng.choice([f"/var/lib/app/{rng.choice(WORDS)}/{rng.randrange(99999)}.dat",
                       f"/tmp/upload-{_hex(rng, 10)}", f"/srv/data/{rng.choice(WORDS)}/{rng.choice(USERS)}.csv",
                       f"/mnt/backup/{rng.choice(WORDS)}.tar.gz"])


def _duration(rng: random.Random) -> str:  # as Go's time.Duration prints
    ms = rng.lognormvariate(5, 1.5)
    if ms < 1000:
        return f"{ms:.3f}ms"
    if ms < 60000:
        return f"{ms / 1000:.3f}s"
    return f"{int(ms // 60000)}m{ms % 60000 / 1000:.1f}s"


def _pod(rng: random.Random) -> str:
    return f"{rng.choice(WORDS)}-{_hex(rng, 9)}-{''.join(rng.choice(string.ascii_lowercase + string.digits) for _ in range(5))}"


FIELDS: dict[str, Callable[[random.Random], str]] = {
    "ip": _ip,
    "port": lambda r: str(r.randrange(1024, 65535)),
    "n": lambda r: str(r.randrange(1, 500)),
    "int": lambda r: str(r.randrange(1000, 10_000_000)),
    "float": lambda r: f"{r.lognormvariate(2, 1.5):.{r.choice([1, 2, 3])}f}",
    "ms": lambda r: str(r.randrange(1, 3000)),
    "dur": _duration,
    "uuid": lambda r: f"{_hex(r, 8)}-{_hex(r, 4)}-4{_hex(r, 3)}-a{_hex(r, 3)}-{_hex(r, 12)}",
    "hex": lambda r: _hex(r, 16),
    "sha": lambda r: _hex(r, 40),
    "path": _path,
    "file": _file,
    "user": lambda r: r.choice(USERS),
    "email": lambda r: f"{r.choice(USERS)}@{r.choice(['example.com', 'gmail.com', 'corp.example.org'])}",
    "word": lambda r: r.choice(WORDS),
    "host": lambda r: r.choice(HOSTS),
    "node": lambda r: r.choice(NODES),
    "ns": lambda r: r.choice(NAMESPACES),
    "pod": _pod,
    "method": lambda r: r.choice(METHODS),
    "status": lambda r: r.choice(STATUSES),
    "ua": lambda r: r.choice(AGENTS),
    "phrase": lambda r: r.choice(PHRASES),
    "controller": lambda r: r.choice(CONTROLLERS),
    "task": lambda r: r.choice(TASKS),
    "unit": lambda r: r.choice(UNITS),
    "iso": lambda r: datetime.fromtimestamp(BASE_S + r.randrange(86400), UTC).isoformat().replace("+00:00", "Z"),
    "qid": lambda r: _hex(r, 10).upper(),
    "mac": lambda r: ":".join(_hex(r, 2) for _ in range(14)),
    "b64": lambda r: "".join(r.choice(string.ascii_letters + string.digits + "+/") for _ in range(43)),
    "sku": lambda r: f"SKU-{r.randrange(10000, 99999)}-{r.choice('ABCDEFGH')}",
    "money": lambda r: f"{r.randrange(1, 900)}.{r.randrange(100):02d}",
}


@dataclass(frozen=True)
class Template:
    family: str
    level: str  # the normalised level a reader should find (logport.spark.logs.fields.LEVELS)
    text: str  # the message with {field} placeholders (FIELDS)
    origin: str = ""  # the family's own level word, logger or program, where its header needs one

    def render(self, rng: random.Random) -> str:
        return _FIELD.sub(lambda m: FIELDS[m.group(1)](rng), self.text)


_FIELD = re.compile(r"\{(" + "|".join(FIELDS) + r")\}")


def _templates(family: str, block: str) -> list[Template]:
    """`level[/origin] | text` lines."""
    out = []
    for line in block.strip().splitlines():
        head, _, text = line.partition(" | ")
        level, _, origin = head.strip().partition("/")
        out.append(Template(family, level, text.strip(), origin))
    return out


# nginx in a pod, Fluent Bit's tail of the container log: access lines on stdout, the error log on stderr.
NGINX = _templates("nginx", """
unknown | {ip} - - [18/Nov/2026:06:13:20 +0000] "{method} {path} HTTP/1.1" {status} {int} "-" "{ua}"
unknown | {ip} - {user} [18/Nov/2026:06:13:20 +0000] "{method} {path} HTTP/2.0" {status} {int} "https://{host}/" "{ua}" rt={float} uct="{float}" urt="{float}"
error | open() "{file}" failed (2: No such file or directory), client: {ip}, server: {host}, request: "GET {path} HTTP/1.1", host: "{host}"
error | upstream timed out (110: Connection timed out) while reading response header from upstream, client: {ip}, server: {host}, request: "{method} {path} HTTP/1.1", upstream: "http://{ip}:8080{path}", host: "{host}"
error | connect() failed (111: Connection refused) while connecting to upstream, client: {ip}, server: {host}, request: "{method} {path} HTTP/1.1", upstream: "http://{ip}:8080{path}", host: "{host}"
error | no live upstreams while connecting to upstream, client: {ip}, server: {host}, request: "{method} {path} HTTP/1.1", upstream: "http://backend{path}", host: "{host}"
error | limiting requests, excess: {float} by zone "perip", client: {ip}, server: {host}, request: "{method} {path} HTTP/1.1", host: "{host}"
error | client intended to send too large body: {int} bytes, client: {ip}, server: {host}, request: "POST {path} HTTP/1.1", host: "{host}"
error | recv() failed (104: Connection reset by peer) while reading response header from upstream, client: {ip}, server: {host}
error | upstream prematurely closed connection while reading response header from upstream, client: {ip}, server: {host}, request: "{method} {path} HTTP/1.1"
error | access forbidden by rule, client: {ip}, server: {host}, request: "GET {path} HTTP/1.1"
error | directory index of "/usr/share/nginx/html/{word}/" is forbidden, client: {ip}, server: {host}
warn | an upstream response is buffered to a temporary file /var/cache/nginx/proxy_temp/{n}/{n}/{int} while reading upstream, client: {ip}
warn | a client request body is buffered to a temporary file /var/cache/nginx/client_temp/{int}, client: {ip}, server: {host}
notice/notice | signal process started
notice/notice | using the "epoll" event method
notice/notice | start worker process {n}
notice/notice | worker process {int} exited with code 0
critical/alert | {n} worker_connections are not enough
critical/crit | SSL_do_handshake() failed (SSL: error:0A00006C:SSL routines::bad key share) while SSL handshaking, client: {ip}, server: 0.0.0.0:443
""")

# Rails (Ruby's Logger format) read by Filebeat, shipped over Lumberjack.
RAILS = _templates("rails", """
info | Started {method} "{path}" for {ip} at 2026-11-18 06:13:20 +0000
info | Processing by {controller} as HTML
info | Completed 200 OK in {ms}ms (Views: {float}ms | ActiveRecord: {float}ms | Allocations: {int})
info | Completed 404 Not Found in {ms}ms (ActiveRecord: {float}ms | Allocations: {int})
error | Completed 500 Internal Server Error in {ms}ms (ActiveRecord: {float}ms | Allocations: {int})
info | Rendered orders/index.html.erb within layouts/application (Duration: {float}ms | Allocations: {int})
info | Rendered layout layouts/application.html.erb (Duration: {float}ms | Allocations: {int})
info | Redirected to https://{host}{path}
error | ActiveRecord::RecordNotFound (Couldn't find User with 'id'={n}):
error | ActionController::RoutingError (No route matches [GET] "{path}"):
warn | Can't verify CSRF token authenticity.
info | Filter chain halted as :authenticate_user! rendered or redirected
info | Enqueued ActionMailer::MailDeliveryJob (Job ID: {uuid}) to Sidekiq(mailers) with arguments: "UserMailer", "receipt", "deliver_now"
info | Performed ActiveStorage::AnalyzeJob (Job ID: {uuid}) from Sidekiq(default) in {float}ms
error | Error performing PaymentSyncJob (Job ID: {uuid}) from Sidekiq(default) in {float}ms: Net::ReadTimeout (Net::ReadTimeout with #<TCPSocket:(closed)>)
debug | Cache read: views/orders/{n}-{int}/{hex} ({float}ms)
debug | Cache write: views/products/{n}-{int}/{hex} ({float}ms)
debug | User Load ({float}ms)  SELECT "users".* FROM "users" WHERE "users"."id" = $1 LIMIT $2  [["id", {n}], ["LIMIT", 1]]
debug | Order Load ({float}ms)  SELECT "orders".* FROM "orders" WHERE "orders"."user_id" = $1 ORDER BY "orders"."created_at" DESC LIMIT $2  [["user_id", {n}], ["LIMIT", 25]]
debug | Product Exists? ({float}ms)  SELECT 1 AS one FROM "products" WHERE "products"."sku" = $1 LIMIT $2  [["sku", "{sku}"], ["LIMIT", 1]]
warn | Rack::Attack throttled request from {ip} to {path}
error | Stripe charge failed for order {n}: Your card was declined. (card_declined)
info | Password reset requested for {email}
info | Puma starting in single mode...
info | * Listening on http://0.0.0.0:3000
critical | Sidekiq job {hex} died after 25 retries: PG::ConnectionBad: could not connect to server: Connection refused
""")

# Spring Boot services: half as text lines read by Filebeat (Lumberjack), half as logstash-encoder JSON
# records over Forward; the logger's name is the template's origin.
JAVA = _templates("java", """
info/o.s.b.w.embedded.tomcat.TomcatWebServer | Tomcat initialized with port 8080 (http)
info/o.s.b.w.embedded.tomcat.TomcatWebServer | Tomcat started on port 8080 (http) with context path '/'
info/com.example.shop.ShopApplication | Started ShopApplication in {float} seconds (process running for {float})
info/com.example.shop.ShopApplication | Starting ShopApplication v1.4.2 using Java 17.0.9 with PID {n} (/app/app.jar started by root in /app)
info/com.example.shop.ShopApplication | No active profile set, falling back to 1 default profile: "default"
info/com.zaxxer.hikari.HikariDataSource | HikariPool-1 - Starting...
info/com.zaxxer.hikari.HikariDataSource | HikariPool-1 - Start completed.
error/com.zaxxer.hikari.pool.HikariPool | HikariPool-1 - Connection is not available, request timed out after {ms}ms.
warn/com.zaxxer.hikari.pool.HikariPool | HikariPool-1 - Thread starvation or clock leap detected (housekeeper delta={dur}).
warn/o.h.engine.jdbc.spi.SqlExceptionHelper | SQL Error: 0, SQLState: 08001
error/o.h.engine.jdbc.spi.SqlExceptionHelper | Connection to {host}:5432 refused. Check that the hostname and port are correct and that the postmaster is accepting TCP/IP connections.
info/o.a.k.c.c.internals.ConsumerCoordinator | [Consumer clientId=consumer-{word}-{n}, groupId={word}] Successfully joined group with generation Generation{generationId={n}, memberId='consumer-{uuid}', protocol='range'}
info/o.a.k.c.c.internals.ConsumerCoordinator | [Consumer clientId=consumer-{word}-{n}, groupId={word}] Adding newly assigned partitions: {word}-{n}
info/o.a.k.c.c.internals.ConsumerCoordinator | [Consumer clientId=consumer-{word}-{n}, groupId={word}] Request joining group due to: group is already rebalancing
warn/o.a.k.clients.NetworkClient | [Producer clientId=producer-{n}] Connection to node {n} ({host}/{ip}:9092) could not be established. Broker may not be available.
info/o.s.web.servlet.DispatcherServlet | Completed initialization in {ms} ms
info/o.s.web.servlet.DispatcherServlet | Initializing Servlet 'dispatcherServlet'
info/com.example.shop.orders.OrderService | Order {int} created for customer {uuid} with {n} items, total {money} EUR
info/com.example.shop.orders.OrderService | Order {int} shipped via DHL, tracking number {hex}
warn/com.example.shop.orders.OrderService | Order {int} could not be reserved: {phrase}
info/com.example.shop.web.RequestLoggingFilter | {method} {path} -> {status} in {ms} ms
error/o.a.c.c.C.[Tomcat].[localhost].[/].[dispatcherServlet] | Servlet.service() for servlet [dispatcherServlet] in context with path [] threw exception [Request processing failed: java.lang.NullPointerException: Cannot invoke "com.example.shop.Customer.getId()" because "customer" is null] with root cause
debug/com.example.shop.cache.RedisCacheClient | Cache miss for key {word}:{int}, loading from database
info/com.example.shop.cache.RedisCacheClient | Evicted {n} keys from cache region {word} in {ms} ms
warn/com.example.shop.auth.JwtFilter | Rejected token for user {user}: token expired at {iso}
warn/com.example.shop.auth.JwtFilter | Invalid JWT signature on request to {path} from {ip}
info/com.example.shop.jobs.ReportJob | Nightly report {uuid} generated: {int} rows, {int} bytes
warn/io.lettuce.core.protocol.ConnectionWatchdog | Reconnecting, last destination was {host}/{ip}:6379
info/io.lettuce.core.protocol.ReconnectionHandler | Reconnected to {host}/{ip}:6379
info/org.apache.catalina.core.StandardService | Starting service [Tomcat]
info/org.apache.catalina.core.StandardEngine | Starting Servlet engine: [Apache Tomcat/10.1.16]
error/o.s.b.a.l.ConditionEvaluationReportLogger | Error starting ApplicationContext. To display the condition evaluation report re-run your application with 'debug' enabled.
info/o.h.e.t.j.p.i.JtaPlatformInitiator | HHH000489: No JTA platform available (set 'hibernate.transaction.jta.platform' to enable JTA platform integration)
warn/com.example.shop.inventory.StockWatcher | Stock for {sku} fell below threshold: {n} left (threshold 20)
info/com.example.shop.payments.StripeGateway | Charge {hex} succeeded for {money} EUR
error/com.example.shop.payments.StripeGateway | Charge attempt for order {int} declined by issuer: {phrase}
warn/r.netty.http.client.HttpClientConnect | [{hex}-{n}, L:/{ip}:{port} ! R:{host}/{ip}:443] The connection observed an error
info/com.example.shop.search.SearchIndexer | Indexed {int} documents into index {word}-v3 in {ms} ms
error/com.example.shop.search.SearchIndexer | Bulk request to index {word}-v3 failed with status 429: es_rejected_execution_exception
trace/com.example.shop.web.TraceInterceptor | Entering {controller} with {n} arguments
""")

# Go services: zap JSON lines over the segment protocol (the variable parts mostly in fields), and logrus
# text lines (logfmt) from containers over Forward.
GO = _templates("go", """
info | starting HTTP server on :8080
info | request completed
info | request completed with status {status} in {dur}
warn | slow request: {method} {path} took {dur}
error | failed to fetch object {file} from bucket {word}: context deadline exceeded
error | dial tcp {ip}:5432: connect: connection refused
error | failed to list *v1.Pod: Get "https://{ip}:443/api/v1/pods?limit=500": dial tcp {ip}:443: i/o timeout
info | leader election won, becoming leader for lease {word}-controller
info | lost leadership of lease {word}-controller after {dur}
debug | cache hit for key {word}/{int}
debug | cache miss for key {word}/{int}, fetching from origin {host}
info | consumer group rebalanced: {n} partitions assigned to member {uuid}
warn | retrying publish to topic {word} after {dur}: broker not available
error | publish to topic {word} failed after 5 attempts: kafka: client has run out of available brokers
info | flushed {int} spans to collector in {dur}
warn | dropping {n} spans: export queue is full (capacity 2048)
info | migrated database schema to version {n} in {dur}
critical | panic recovered in handler {path}: runtime error: invalid memory address or nil pointer dereference
critical | unable to load TLS certificate from /etc/tls/tls.crt: open /etc/tls/tls.crt: no such file or directory
info | received signal terminated, shutting down gracefully
info | server stopped after draining {n} connections in {dur}
warn | rate limit exceeded for client {ip}, {n} requests in the last minute
info | user {user} authenticated via OIDC provider {host}
error | token validation failed for subject {uuid}: token is expired by {dur}
info | scheduled job {word}-cleanup finished, removed {n} rows in {dur}
warn | certificate for {host} expires in {n} days
info | watching config map {ns}/{word}-config for changes
info | config reloaded from {file}, {n} keys changed
info/logrus | processed message {uuid} from queue {word} in {dur}
warn/logrus | queue {word} is backing up: {int} messages waiting
error/logrus | failed to ack message {uuid} on queue {word}: channel/connection is not open
info/logrus | health check passed for dependency {host} in {dur}
error/logrus | health check failed for dependency {host}: Get "https://{host}/healthz": context deadline exceeded
debug/logrus | resolving {host} via {ip}:53
""")

# Python apps: python-json-logger records over Forward, text lines (`%(asctime)s %(levelname)s %(name)s:
# %(message)s`) read by Filebeat.
PYTHON = _templates("python", """
info/celery.worker.strategy | Task {task}[{uuid}] received
info/celery.app.trace | Task {task}[{uuid}] succeeded in {float}s: None
warn/celery.app.trace | Task {task}[{uuid}] retry: Retry in {n}s: ConnectionError('Connection refused')
error/celery.app.trace | Task {task}[{uuid}] raised unexpected: TimeoutError('Operation timed out after {n} seconds')
info/gunicorn.error | Booting worker with pid: {int}
info/gunicorn.error | Worker exiting (pid: {int})
critical/gunicorn.error | WORKER TIMEOUT (pid:{int})
info/gunicorn.error | Listening at: http://0.0.0.0:8000 ({int})
info/gunicorn.error | Handling signal: term
debug/urllib3.connectionpool | Starting new HTTPS connection (1): {host}:443
debug/urllib3.connectionpool | https://{host}:443 "{method} {path} HTTP/1.1" {status} {int}
warn/django.request | Not Found: {path}
error/django.request | Internal Server Error: {path}
error/django.security.DisallowedHost | Invalid HTTP_HOST header: '{host}'. You may need to add '{host}' to ALLOWED_HOSTS.
info/shop.importer | Processed batch {n} of {n} ({int} records) in {float}s
info/shop.uploads | User {user} uploaded {file} ({int} bytes)
info/shop.webhooks | Payment webhook {hex} ignored: event type charge.refunded is not handled
error/sqlalchemy.pool.impl.QueuePool | Exception during reset or similar: (psycopg2.OperationalError) server closed the connection unexpectedly
error/shop.db | (psycopg2.OperationalError) connection to server at "{host}" ({ip}), port 5432 failed: Connection refused
error/asyncio | Task was destroyed but it is pending!
warn/asyncio | Executing <Task pending name='Task-{n}' coro=<handle_request() running at {file}:{n}>> took {float} seconds
info/shop.auth | Login succeeded for {email} from {ip}
warn/shop.auth | Login failed for {email} from {ip}: invalid password ({n} attempts)
info/shop.mail | Sent receipt email to {email} for order {int}
error/shop.mail | SMTP delivery to {email} failed: (550, b'5.1.1 The email account that you tried to reach does not exist')
debug/shop.features | Feature flag {word}_v2 evaluated to True for user {user}
info/shop.exports | Export {uuid} of {word} finished: {int} rows written to {file}
warn/shop.exports | Export {uuid} of {word} is taking longer than expected ({float}s so far)
info/apscheduler.executors.default | Running job "purge_expired_sessions (trigger: interval[0:05:00], next run at: 2026-11-18 06:18:20 UTC)"
critical/shop.payments | Payment provider returned malformed response for charge {hex}: Expecting value: line 1 column 1 (char 0)
""")

# Kubernetes components (klog) and CoreDNS in containers, tailed by Fluent Bit (all on stderr).
KUBE = _templates("kube", """
info/I | "SyncLoop ADD" source="api" pods=["{ns}/{pod}"]
info/I | "SyncLoop DELETE" source="api" pods=["{ns}/{pod}"]
info/I | "SyncLoop (PLEG): event for pod" pod="{ns}/{pod}" event={"ID":"{uuid}","Type":"ContainerStarted","Data":"{sha}"}
info/I | "Killing container with a grace period" pod="{ns}/{pod}" podUID="{uuid}" containerName="{word}" containerID="containerd://{sha}" gracePeriod=30
warn/W | "Probe failed" probeType="Readiness" pod="{ns}/{pod}" podUID="{uuid}" containerName="{word}" probeResult="failure" output="Get \\"http://{ip}:8080/healthz\\": dial tcp {ip}:8080: connect: connection refused"
error/E | "Error syncing pod, skipping" err="failed to \\"StartContainer\\" for \\"{word}\\" with CrashLoopBackOff: \\"back-off 5m0s restarting failed container\\"" pod="{ns}/{pod}" podUID="{uuid}"
info/I | Successfully assigned {ns}/{pod} to {node}
error/E | "Unable to attach or mount volumes for pod; skipping pod" err="unmounted volumes=[{word}], unattached volumes=[], failed to process volumes=[]: timed out waiting for the condition" pod="{ns}/{pod}"
info/I | "Too few replicas" replicaSet="{ns}/{word}-{hex}" need={n} creating={n}
info/I | "Event occurred" object="{ns}/{pod}" fieldPath="" kind="Pod" apiVersion="v1" type="Normal" reason="Scheduled" message="Successfully assigned {ns}/{pod} to {node}"
info/I | Watch close - *v1.Pod total {n} items received
warn/W | failed to list *v1.Endpoints: Get "https://{ip}:443/api/v1/endpoints?limit=500&resourceVersion=0": dial tcp {ip}:443: connect: connection refused
info/I | "Observed pod startup duration" pod="{ns}/{pod}" podStartSLOduration={float} podStartE2EDuration="{dur}"
info/I | "Attempting to register node" node="{node}"
info/I | "Successfully registered node" node="{node}"
info/I | Starting reflector *v1.Node (0s) from k8s.io/client-go/informers/factory.go:159
error/E | "failed to update lease" err="Put \\"https://{ip}:6443/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{node}?timeout=10s\\": context deadline exceeded"
critical/F | failed to run Kubelet: unable to load client CA file /etc/kubernetes/pki/ca.crt: open /etc/kubernetes/pki/ca.crt: no such file or directory
info/coredns | [INFO] {ip}:{port} - {int} "A IN {host}. udp {n} false 512" NOERROR qr,rd,ra {n} {float}s
info/coredns | [INFO] {ip}:{port} - {int} "AAAA IN {host}. udp {n} false 512" NXDOMAIN qr,aa,rd {n} {float}s
error/coredns | [ERROR] plugin/errors: 2 {host}. AAAA: read udp {ip}:{port}->{ip}:53: i/o timeout
info/coredns | [INFO] plugin/reload: Running configuration SHA512 = {sha}
warn/coredns | [WARNING] No files matching import glob pattern: /etc/coredns/custom/*.server
""")

# journald, read by Fluent Bit's systemd input (MESSAGE, PRIORITY, _HOSTNAME, SYSLOG_IDENTIFIER).
JOURNALD = _templates("journald", """
info/sshd | Accepted publickey for {user} from {ip} port {port} ssh2: ED25519 SHA256:{b64}
info/sshd | Failed password for invalid user {user} from {ip} port {port} ssh2
info/sshd | Invalid user {user} from {ip} port {port}
info/sshd | Disconnected from authenticating user {user} {ip} port {port} [preauth]
info/sshd | Connection closed by {ip} port {port} [preauth]
info/sshd | pam_unix(sshd:session): session opened for user {user}(uid={n}) by (uid=0)
info/sshd | pam_unix(sshd:session): session closed for user {user}
info/sshd | Received disconnect from {ip} port {port}:11: disconnected by user
info/systemd | Started Session {n} of User {user}.
info/systemd | {unit}: Deactivated successfully.
info/systemd | {unit}: Consumed {float}s CPU time.
notice/systemd | {unit}: Main process exited, code=exited, status=1/FAILURE
warn/systemd | {unit}: Failed with result 'exit-code'.
info/systemd | {unit}: Scheduled restart job, restart counter is at {n}.
info/systemd | Reloading requested from client PID {int} ('systemctl') (unit session-{n}.scope)...
critical/kernel | Out of memory: Killed process {int} (java) total-vm:{int}kB, anon-rss:{int}kB, file-rss:{n}kB, shmem-rss:{n}kB, UID:{n} pgtables:{int}kB oom_score_adj:{n}
warn/kernel | [UFW BLOCK] IN=eth0 OUT= MAC={mac} SRC={ip} DST={ip} LEN={n} TOS=0x00 PREC=0x00 TTL={n} ID={int} PROTO=TCP SPT={port} DPT={port} WINDOW={int} RES=0x00 SYN URGP=0
info/kernel | EXT4-fs (nvme0n1p1): mounted filesystem with ordered data mode. Quota mode: none.
warn/kernel | TCP: request_sock_TCP: Possible SYN flooding on port {port}. Sending cookies.  Check SNMP counters.
warn/kernel | nf_conntrack: nf_conntrack: table full, dropping packet
info/CRON | ({user}) CMD ({file} > /dev/null 2>&1)
info/CRON | pam_unix(cron:session): session opened for user {user}(uid={n}) by (uid=0)
info/containerd | time="{iso}" level=info msg="StartContainer for \\"{sha}\\" returns successfully"
info/containerd | time="{iso}" level=info msg="RemoveContainer for \\"{sha}\\" returns successfully"
error/containerd | time="{iso}" level=error msg="ContainerStatus for \\"{sha}\\" failed" error="rpc error: code = NotFound desc = an error occurred when try to find container"
warn/dockerd | time="{iso}" level=warning msg="Health check for container {sha} error: context deadline exceeded"
info/sudo | {user} : TTY=pts/{n} ; PWD=/home/{user} ; USER=root ; COMMAND=/usr/bin/systemctl restart {unit}
debug/systemd-resolved | Using degraded feature set UDP instead of UDP+EDNS0 for DNS server {ip}.
""")

# syslog daemons through Fluent Bit's syslog input (rfc3164: pri, host, ident, pid, message).
SYSLOG = _templates("syslog", """
info/postfix/smtpd | connect from {host}[{ip}]
info/postfix/smtpd | disconnect from {host}[{ip}] ehlo=1 mail=1 rcpt=1 data=1 quit=1 commands=5
notice/postfix/smtpd | NOQUEUE: reject: RCPT from {host}[{ip}]: 554 5.7.1 <{email}>: Relay access denied; from=<{email}> to=<{email}> proto=ESMTP helo=<{host}>
info/postfix/smtpd | {qid}: client={host}[{ip}]
info/postfix/smtp | {qid}: to=<{email}>, relay={host}[{ip}]:25, delay={float}, delays={float}/{float}/{float}/{float}, dsn=2.0.0, status=sent (250 2.0.0 OK {int} {hex} - gsmtp)
info/postfix/smtp | {qid}: to=<{email}>, relay=none, delay={float}, delays={float}/{float}/{float}/0, dsn=4.4.1, status=deferred (connect to {host}[{ip}]:25: Connection timed out)
warn/postfix/smtpd | warning: hostname {host} does not resolve to address {ip}: Name or service not known
info/haproxy | {ip}:{port} [18/Nov/2026:06:13:20.{n}] www~ app/web{n} {n}/{n}/{n}/{n}/{ms} {status} {int} - - ---- {n}/{n}/{n}/{n}/0 0/0 "{method} {path} HTTP/1.1"
critical/haproxy | Server app/web{n} is DOWN, reason: Layer4 connection problem, info: "Connection refused", check duration: {n}ms. {n} active and 0 backup servers left. {n} sessions active, 0 requeued, 0 remaining in queue.
notice/haproxy | Server app/web{n} is UP, reason: Layer7 check passed, code: 200, check duration: {n}ms. {n} active and 0 backup servers online. 0 sessions requeued, 0 total in queue.
info/postgres | [{n}-1] LOG:  checkpoint starting: time
info/postgres | [{n}-1] LOG:  checkpoint complete: wrote {n} buffers ({float}%); 0 WAL file(s) added, 0 removed, {n} recycled; write={float} s, sync={float} s, total={float} s
error/postgres | [{n}-1] ERROR:  duplicate key value violates unique constraint "{word}_pkey"
error/postgres | [{n}-1] FATAL:  password authentication failed for user "{user}"
info/postgres | [{n}-1] LOG:  automatic vacuum of table "shop.public.{word}": index scans: 1
info/postgres | [{n}-1] LOG:  duration: {float} ms  statement: SELECT * FROM {word} WHERE id = {int}
warn/postgres | [{n}-1] WARNING:  there is no transaction in progress
info/redis | {n}:M 18 Nov 2026 06:13:20.{n} * Background saving started by pid {int}
info/redis | {n}:C 18 Nov 2026 06:13:20.{n} * DB saved on disk
info/redis | {n}:M 18 Nov 2026 06:13:20.{n} * {n} changes in {n} seconds. Saving...
warn/redis | {n}:M 18 Nov 2026 06:13:20.{n} # WARNING Memory overcommit must be enabled! Without it, a background save or replication may fail under low memory condition.
info/dhclient | DHCPACK of {ip} from {ip} (xid=0x{hex})
info/ntpd | adjusting local clock by {float}s
error/named | client @0x{hex} {ip}#{port} ({host}): query (cache) '{host}/A/IN' denied
""")

TEMPLATES: list[Template] = NGINX + RAILS + JAVA + GO + PYTHON + KUBE + JOURNALD + SYSLOG

# Syslog severities (RFC 5424) and the names shippers write for the levels.
SYSLOG_SEVERITY = {"critical": 2, "error": 3, "warn": 4, "notice": 5, "info": 6, "debug": 7}
RUBY = {"debug": "DEBUG", "info": "INFO", "warn": "WARN", "error": "ERROR", "critical": "FATAL"}
JAVA_LEVEL = {"trace": "TRACE", "debug": "DEBUG", "info": "INFO", "warn": "WARN", "error": "ERROR"}
PYTHON_LEVEL = {"debug": "DEBUG", "info": "INFO", "warn": "WARNING", "error": "ERROR", "critical": "CRITICAL"}
ZAP = {"debug": "debug", "info": "info", "warn": "warn", "error": "error", "critical": "dpanic"}
LOGRUS = {"debug": "debug", "info": "info", "warn": "warning", "error": "error"}


@dataclass(frozen=True)
class Message:
    template: int  # index in TEMPLATES
    time_ns: int
    text: str


@dataclass(frozen=True)
class Shipped:
    """One event as stored: a batch entry (`source` forward/lumberjack, `tag`, `record`) or, from the segment
    protocol, an opaque JSON line (source None, `record` its object, `raw` its bytes)."""

    message: Message
    source: str | None
    tag: str
    record: dict[str, object]
    host: str | None
    raw: bytes | None = None


def message_stream(count: int, rng: random.Random, templates: Sequence[int], start_s: int = BASE_S,
                   minutes: int = 20, every: int = 0) -> list[Message]:
    """`count` messages of the given templates over `minutes` from start_s, in time order; templates drawn by a
    Zipf law (the first in `templates` most often) so a few are frequent and many rare, as in real logs; with
    `every`, each template that many times more."""
    weights = [1.0 / (rank + 1) for rank in range(len(templates))]
    chosen = rng.choices(list(templates), weights, k=count) + [t for t in templates for _ in range(every)]
    rng.shuffle(chosen)
    times = sorted(rng.randrange(minutes * 60 * 10**9) for _ in chosen)
    return [Message(t, start_s * 10**9 + dt, TEMPLATES[t].render(rng)) for t, dt in zip(chosen, times, strict=True)]


def _stamp(time_ns: int, fmt: str) -> str:
    return datetime.fromtimestamp(time_ns / 1e9, UTC).strftime(fmt)


def ship(message: Message, rng: random.Random) -> Shipped:
    """The event a shipper makes of the message, as its family's programs ship it."""
    t = TEMPLATES[message.template]
    level, text, when = t.level, message.text, message.time_ns
    iso = _stamp(when, "%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    node = rng.choice(NODES)
    kube = {"host": node, "pod_name": _pod(rng), "namespace_name": rng.choice(NAMESPACES),
            "container_name": t.family}
    if t.family == "nginx":
        if level == "unknown":
            return Shipped(message, "forward", "kube.ingress", {"log": text + "\n", "stream": "stdout",
                                                                 "kubernetes": kube}, node)
        word = t.origin or level
        client = "" if t.origin else f"*{rng.randrange(1, 99999)} "
        line = f"{_stamp(when, '%Y/%m/%d %H:%M:%S')} [{word}] {rng.randrange(7, 40)}#0: {client}{text}"
        return Shipped(message, "forward", "kube.ingress", {"log": line + "\n", "stream": "stderr",
                                                             "kubernetes": kube}, node)
    if t.family == "rails":
        host = f"web-{rng.randrange(1, 4)}"
        line = (f"{RUBY[level][0]}, [{_stamp(when, '%Y-%m-%dT%H:%M:%S.%f')} #{rng.randrange(100, 9999)}]"
                f" {RUBY[level]:>5} -- : [{FIELDS['uuid'](rng)}] {text}")
        return Shipped(message, "lumberjack", "filebeat", {
            "@timestamp": iso, "message": line, "host": {"name": host, "os": {"family": "debian"}},
            "log": {"file": {"path": "/srv/shop/log/production.log"}, "offset": rng.randrange(10**8)},
            "agent": {"type": "filebeat", "version": "8.15.0"}}, host)
    if t.family == "java":
        host = f"shop-{rng.randrange(1, 4)}"
        thread = rng.choice(["main", f"http-nio-8080-exec-{rng.randrange(1, 11)}", "scheduling-1"])
        if message.template % 2:  # a text line read by Filebeat, with ECS fields beside it
            line = (f"{_stamp(when, '%Y-%m-%d %H:%M:%S.%f')[:-3]} {JAVA_LEVEL[level]:>5} 1 --- [{thread}] "
                    f"{t.origin:<40} : {text}")
            record: dict[str, object] = {"@timestamp": iso, "message": line, "host": {"name": host}}
            if message.template % 4 == 1:
                record["log"] = {"level": JAVA_LEVEL[level].lower(), "logger": t.origin}
            else:
                record["log.level"] = JAVA_LEVEL[level]
            return Shipped(message, "lumberjack", "filebeat", record, host)
        return Shipped(message, "forward", "app.shop", {
            "@timestamp": iso, "@version": "1", "message": text, "logger_name": t.origin, "thread_name": thread,
            "level": JAVA_LEVEL[level], "level_value": 20000, "hostname": host}, host)
    if t.family == "go":
        if t.origin == "logrus":
            line = f'time="{iso}" level={LOGRUS[level]} msg="{_logfmt_escape(text)}" service={rng.choice(WORDS)}'
            return Shipped(message, "forward", "kube.workers", {"log": line + "\n", "stream": "stderr",
                                                                 "kubernetes": kube}, node)
        host = f"gateway-{rng.randrange(1, 6)}"
        record = {"level": ZAP[level], "ts": round(when / 1e9, 6), "caller": f"server/{rng.choice(WORDS)}.go:{rng.randrange(20, 400)}",
                  "msg": text, "hostname": host}
        if "completed" in text:
            record.update({"method": rng.choice(METHODS), "status": int(rng.choice(STATUSES)),
                           "duration_ms": rng.randrange(1, 900)})
        raw = orjson.dumps(record)
        return Shipped(message, None, "", record, host, raw)
    if t.family == "python":
        host = f"worker-{rng.randrange(1, 4)}"
        if message.template % 2:
            return Shipped(message, "forward", "app.worker", {
                "asctime": _stamp(when, "%Y-%m-%d %H:%M:%S,%f")[:-3], "levelname": PYTHON_LEVEL[level],
                "name": t.origin, "message": text, "hostname": host}, host)
        line = f"{_stamp(when, '%Y-%m-%d %H:%M:%S,%f')[:-3]} {PYTHON_LEVEL[level]} {t.origin}: {text}"
        return Shipped(message, "lumberjack", "filebeat", {"@timestamp": iso, "message": line,
                                                           "host": {"name": host}}, host)
    if t.family == "kube":
        if t.origin == "coredns":
            line = text
        else:
            line = (f"{t.origin}{_stamp(when, '%m%d %H:%M:%S.%f')}    {rng.randrange(1, 9)} "
                    f"{rng.choice(['kubelet.go', 'pod_workers.go', 'reflector.go', 'event.go'])}:{rng.randrange(100, 2500)}] {text}")
        return Shipped(message, "forward", "kube.system", {"log": line + "\n", "stream": "stderr",
                                                            "kubernetes": kube}, node)
    if t.family == "journald":
        host = f"node-{rng.randrange(1, 6)}"
        return Shipped(message, "forward", "systemd", {
            "MESSAGE": text, "PRIORITY": str(SYSLOG_SEVERITY[level]), "_HOSTNAME": host,
            "SYSLOG_IDENTIFIER": t.origin, "_PID": str(rng.randrange(1, 65000)), "_TRANSPORT": "journal"}, host)
    if t.family == "syslog":
        host = f"mx-{rng.randrange(1, 3)}"
        facility = rng.choice([2, 3, 16, 17])  # mail, daemon, local0, local1
        return Shipped(message, "forward", "syslog", {
            "pri": str(facility * 8 + SYSLOG_SEVERITY[level]), "time": _stamp(when, "%b %d %H:%M:%S"),
            "host": host, "ident": t.origin, "pid": str(rng.randrange(100, 30000)), "message": text}, host)
    raise AssertionError(t.family)


def _logfmt_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def stored_bodies(shipped: Sequence[Shipped], per_batch: int = 50) -> tuple[dict[str, list[bytes]],
                                                                          dict[str, list[list[Shipped]]]]:
    """Segment name (the source, or `json`) -> stored bodies: the events of one source and tag in batches of
    per_batch, as a shipper's buffer sends them; each segment-protocol event a body of its own. Beside it the
    same shape with each body's events (the entries' order)."""
    bodies: dict[str, list[bytes]] = {}
    events: dict[str, list[list[Shipped]]] = {}
    pending: dict[tuple[str, str], list[Shipped]] = {}  # a shipper's buffer per source and tag

    def flush(run: list[Shipped]) -> None:
        first = run[0]
        assert first.source is not None
        triples = [(s.message.time_ns // 10**9, s.message.time_ns % 10**9, s.record) for s in run]
        bodies.setdefault(first.source, []).append(encode_batch(
            first.tag, triples, {"size": len(run), "source": first.source, "peer": "127.0.0.1:40000"}))
        events.setdefault(first.source, []).append(list(run))
        run.clear()

    for s in shipped:
        if s.source is None:
            assert s.raw is not None
            bodies.setdefault("json", []).append(s.raw)
            events.setdefault("json", []).append([s])
            continue
        run = pending.setdefault((s.source, s.tag), [])
        run.append(s)
        if len(run) >= per_batch:
            flush(run)
    for run in pending.values():
        if run:
            flush(run)
    return bodies, events


def corpus(count: int, seed: int = 11, start_s: int = BASE_S, minutes: int = 20, exclude: Sequence[int] = (),
           every: int = 0) -> Iterator[Shipped]:
    """`count` (+ every x templates) shipped messages of every template but `exclude`, in time order."""
    rng = random.Random(seed)
    order = list(range(len(TEMPLATES)))
    random.Random(0).shuffle(order)  # which templates are frequent: the same in every corpus
    order = [i for i in order if i not in set(exclude)]
    for message in message_stream(count, rng, order, start_s, minutes, every):
        yield ship(message, rng)


def template_index(family: str, text_start: str) -> int:
    """The index of the family's template whose text starts so."""
    found = [i for i, t in enumerate(TEMPLATES) if t.family == family and t.text.startswith(text_start)]
    assert len(found) == 1, (family, text_start, found)
    return found[0]
