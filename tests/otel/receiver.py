"""An OTLP/HTTP traces receiver for tests/otlp.rs, built on the official protobuf definitions
(PyPI's opentelemetry-proto): every span of every export request it is sent, decoded, one JSON
line each in OUT. It prints the port it listens on (127.0.0.1) on its first line.

    receiver.py OUT [ok|refuse|hang]

`refuse` answers every request 503; `hang` reads it and never answers.
"""
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

OUT, MODE = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else "ok")
lock = threading.Lock()


def value(any_value):
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return [value(v) for v in any_value.array_value.values]
    return getattr(any_value, kind) if kind else None


def attributes(pairs):
    return {kv.key: value(kv.value) for kv in pairs}


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if MODE == "hang":
            time.sleep(3600)
        if MODE == "refuse":
            self.send_response(503)
            self.end_headers()
            return
        request = trace_service_pb2.ExportTraceServiceRequest()
        request.ParseFromString(body)
        lines = []
        for resource_spans in request.resource_spans:
            resource = attributes(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    lines.append(json.dumps({
                        "path": self.path,
                        "content_type": self.headers.get("Content-Type"),
                        "auth": self.headers.get("Authorization"),
                        "resource": resource,
                        "scope": scope_spans.scope.name,
                        "trace_id": span.trace_id.hex(),
                        "span_id": span.span_id.hex(),
                        "parent_span_id": span.parent_span_id.hex(),
                        "name": span.name,
                        "kind": span.kind,
                        "start": span.start_time_unix_nano,
                        "end": span.end_time_unix_nano,
                        "attributes": attributes(span.attributes),
                        "events": [{"name": e.name, "time": e.time_unix_nano,
                                    "attributes": attributes(e.attributes)} for e in span.events],
                        "status": {"code": span.status.code, "message": span.status.message},
                    }))
        with lock, open(OUT, "a") as out:
            for line in lines:
                out.write(line + "\n")
        answer = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
server.daemon_threads = True
print(server.server_address[1], flush=True)
server.serve_forever()
