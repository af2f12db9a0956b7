import Foundation
import Hummingbird
import HummingbirdTesting
import LedgerCore
import LedgerServer
import NIOCore
import Testing

@Suite("POST /v1/events and the feeds, over HTTP on PostgreSQL")
struct EventsAPITests {
    @Test("append one event, replay it, conflict on a changed body, read it back from both feeds")
    func appendAndRead() async throws {
        try await APIHarness.run { http, api in
            let created = try await http.execute(
                uri: "/v1/events", method: .post, headers: api.headers(.writer), body: body(.object(eventJSON())))
            #expect(created.status == .created)
            let stored = try #require(try created.events.first)
            #expect(stored["version"] == 1)
            #expect(stored["position"] == 1)
            #expect(stored["event_id"]?.stringValue?.count == 36)
            #expect(stored["recorded_at"]?.stringValue?.hasSuffix("Z") == true)
            #expect(stored["hash"]?.stringValue?.count == 64)

            let replay = try await http.execute(
                uri: "/v1/events", method: .post, headers: api.headers(.writer), body: body(.object(eventJSON())))
            #expect(replay.status == .ok)
            #expect(try replay.events.first == stored)

            var changed = eventJSON()
            changed["metadata"] = ["note": "different"]
            let conflict = try await http.execute(
                uri: "/v1/events", method: .post, headers: api.headers(.writer), body: body(.object(changed)))
            #expect(conflict.status == .conflict)
            #expect(conflict.errorCode == "idempotency_conflict")

            let stale = try await http.execute(
                uri: "/v1/events", method: .post, headers: api.headers(.writer),
                body: body(.object(eventJSON(key: "k2", overrides: ["expected_version": 0]))))
            #expect(stale.status == .conflict)
            #expect(stale.errorCode == "version_conflict")

            let feed = try await http.execute(uri: "/v1/events?after_position=0&limit=10", method: .get, headers: api.headers(.auditor))
            #expect(feed.status == .ok)
            #expect(try feed.events == [stored])
            #expect(try feed.json.objectValue?["next_after_position"] == 1)

            let stream = try await http.execute(uri: "/v1/subscribers/sub-1/events", method: .get, headers: api.headers(.auditor))
            #expect(stream.status == .ok)
            #expect(try stream.events == [stored])

            let empty = try await http.execute(uri: "/v1/subscribers/nobody/events", method: .get, headers: api.headers(.admin))
            #expect(empty.status == .ok)
            #expect(try empty.events.isEmpty)
        }
    }

    @Test("a batch is stored whole with consecutive positions, or not at all")
    func batches() async throws {
        try await APIHarness.run { http, api in
            let bad: JSONValue = .object([
                "events": .array([
                    .object(eventJSON(subscriber: "a", key: "b1")),
                    .object(eventJSON(subscriber: "b", key: "b2")),
                    .object(eventJSON(subscriber: "a", key: "b3", overrides: ["occurred_at": "2026-02-30T00:00:00Z"])),
                ])
            ])
            let refused = try await http.execute(uri: "/v1/events", method: .post, headers: api.headers(.writer), body: body(bad))
            #expect(refused.status == .unprocessableContent)
            #expect(refused.errorCode == "invalid_event")
            #expect(refused.errorField == "events[2].occurred_at")

            let conflicting: JSONValue = .object([
                "events": .array([
                    .object(eventJSON(subscriber: "a", key: "b1")),
                    .object(eventJSON(subscriber: "a", key: "b2", overrides: ["expected_version": 5])),
                ])
            ])
            let conflict = try await http.execute(uri: "/v1/events", method: .post, headers: api.headers(.writer), body: body(conflicting))
            #expect(conflict.errorCode == "version_conflict")

            let feed = try await http.execute(uri: "/v1/events", method: .get, headers: api.headers(.auditor))
            #expect(try feed.events.isEmpty)

            let good: JSONValue = .object(["events": .array((1...3).map { .object(eventJSON(subscriber: "a", key: "g\($0)")) })])
            let created = try await http.execute(uri: "/v1/events", method: .post, headers: api.headers(.writer), body: body(good))
            #expect(created.status == .created)
            #expect(try created.events.map { $0["position"] } == [1, 2, 3])
            #expect(try created.events.map { $0["version"] } == [1, 2, 3])

            let page = try await http.execute(uri: "/v1/subscribers/a/events?after=1&limit=1", method: .get, headers: api.headers(.auditor))
            #expect(try page.events.map { $0["version"] } == [2])
        }
    }

    @Test("bad input gets the contract's error naming the field, and nothing is stored")
    func badInput() async throws {
        try await APIHarness.run(maxBodyBytes: 64 * 1024) { http, api in
            var cases: [(String, ByteBuffer, HTTPResponse.Status, String, String?)] = [
                ("malformed JSON", body(#"{"subscriber_id": "x", "#), .badRequest, "invalid_request", nil),
                ("duplicate key", body(#"{"type":"purchase","type":"refund"}"#), .badRequest, "invalid_request", nil),
                (
                    "invalid UTF-8", ByteBuffer(bytes: Array(#"{"subscriber_id":""#.utf8) + [0xC0, 0x80] + Array(#""}"#.utf8)), .badRequest,
                    "invalid_request", nil
                ),
                ("not an object", body("[1, 2]"), .unprocessableContent, "invalid_event", "$"),
            ]
            func event(_ overrides: [String: JSONValue], without: String? = nil) -> ByteBuffer {
                var e = eventJSON(overrides: overrides)
                if let without { e[without] = nil }
                return body(.object(e))
            }
            var data = eventJSON()["data"]!.objectValue!
            data["transaction_id"] = nil
            cases += [
                ("unknown type", event(["type": "upgrade"]), .unprocessableContent, "invalid_event", "type"),
                ("missing subscriber", event([:], without: "subscriber_id"), .unprocessableContent, "invalid_event", "subscriber_id"),
                ("missing data field", event(["data": .object(data)]), .unprocessableContent, "invalid_event", "data.transaction_id"),
                ("bad timestamp", event(["occurred_at": "yesterday"]), .unprocessableContent, "invalid_event", "occurred_at"),
                ("no time zone", event(["occurred_at": "2026-03-01T10:00:00"]), .unprocessableContent, "invalid_event", "occurred_at"),
                ("subscriber alphabet", event(["subscriber_id": "has space"]), .unprocessableContent, "invalid_event", "subscriber_id"),
                (
                    "subscriber too long", event(["subscriber_id": .string(String(repeating: "a", count: 201))]), .unprocessableContent,
                    "invalid_event", "subscriber_id"
                ),
                ("unknown field", event(["ocurred_at": "2026-03-01T10:00:00Z"]), .unprocessableContent, "invalid_event", "ocurred_at"),
                ("ledger-assigned field", event(["position": 7]), .unprocessableContent, "invalid_event", "position"),
                ("bad environment", event(["environment": "staging"]), .unprocessableContent, "invalid_event", "environment"),
                (
                    "float price",
                    event(["data": .object(data.merging(["transaction_id": "t", "price_minor": .number(JSONNumber(jsonText: "9.99")!)]) { $1 })]),
                    .unprocessableContent, "invalid_event", "data.price_minor"
                ),
                ("oversize body", ByteBuffer(repeating: UInt8(ascii: " "), count: 65 * 1024), .contentTooLarge, "payload_too_large", nil),
            ]
            for (name, requestBody, status, code, field) in cases {
                let response = try await http.execute(uri: "/v1/events", method: .post, headers: api.headers(.writer), body: requestBody)
                #expect(response.status == status, "\(name)")
                #expect(response.errorCode == code, "\(name)")
                #expect(response.errorField == field, "\(name)")
                let message = try response.json.objectValue?["error"]?.objectValue?["message"]?.stringValue ?? ""
                #expect(!message.isEmpty, "\(name)")
            }
            let feed = try await http.execute(uri: "/v1/events", method: .get, headers: api.headers(.auditor))
            #expect(try feed.events.isEmpty)
        }
    }

    @Test("query parameters are checked, not ignored")
    func badQueries() async throws {
        try await APIHarness.run { http, api in
            for uri in [
                "/v1/events?limit=0", "/v1/events?limit=5000", "/v1/events?after_position=-1", "/v1/events?limit=ten",
                "/v1/subscribers/a/events?after=x", "/v1/subscribers/bad%20id/events",
            ] {
                let response = try await http.execute(uri: uri, method: .get, headers: api.headers(.auditor))
                #expect(response.status == .badRequest, "\(uri)")
                #expect(response.errorCode == "invalid_request", "\(uri)")
            }
        }
    }
}
