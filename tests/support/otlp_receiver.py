#!/usr/bin/env python3
"""A small OTLP/HTTP trace receiver for tests, built on the
opentelemetry-proto package: it accepts ExportTraceServiceRequest
messages (protobuf) on POST /v1/traces and appends each span as a JSON
line to OUT (trace and span IDs in hex, times in nanoseconds, attributes
as a flat object, events by name).

usage: otlp_receiver.py PORT_FILE OUT
Listens on 127.0.0.1 at a port the system picks, written to PORT_FILE
once it listens.
"""
import json
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


def value(v):
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


def spans(req):
    for rs in req.resource_spans:
        service = {a.key: value(a.value) for a in rs.resource.attributes}.get("service.name")
        for ss in rs.scope_spans:
            for s in ss.spans:
                yield {
                    "service": service,
                    "trace_id": s.trace_id.hex(),
                    "span_id": s.span_id.hex(),
                    "parent_span_id": s.parent_span_id.hex(),
                    "name": s.name,
                    "kind": s.kind,
                    "start": s.start_time_unix_nano,
                    "end": s.end_time_unix_nano,
                    "attributes": {a.key: value(a.value) for a in s.attributes},
                    "events": [e.name for e in s.events],
                    "status": s.status.code,
                    "status_message": s.status.message,
                }


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.path != "/v1/traces" or "protobuf" not in self.headers.get("Content-Type", ""):
            self.send_response(404)
            self.end_headers()
            return
        req = ExportTraceServiceRequest()
        req.ParseFromString(body)
        with open(OUT, "a") as f:
            for s in spans(req):
                f.write(json.dumps(s) + "\n")
        out = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    PORT_FILE, OUT = sys.argv[1], sys.argv[2]
    server = HTTPServer(("127.0.0.1", 0), Handler)
    with open(PORT_FILE + ".tmp", "w") as f:
        f.write(str(server.server_address[1]))
    import os

    os.rename(PORT_FILE + ".tmp", PORT_FILE)
    server.serve_forever()
