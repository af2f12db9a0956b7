import Foundation
import Hummingbird
import LedgerCore
import LedgerStore
import Prometheus

/// `/health` (process up), `/ready` (database reachable, schema current), `/metrics` (Prometheus).
struct OperationsRoutes {
    let migrations: MigrationRunner
    let registry: PrometheusCollectorRegistry?
    /// Reported in `/metrics` (size, hits, misses, whether it serves) when the server keeps one.
    var cache: LedgerCache? = nil
    /// Reported in `/metrics` (reads per source, replicas' positions).
    var readRouter: ReadRouter? = nil
    /// The stores, for what they say in `/ready` while still ready (Stripe: API versions it did not know).
    var stores: [any StoreModule] = []

    func register(on router: Router<LedgerRequestContext>) {
        router.get("health") { _, _ in Response.json(["status": "ok"]) }
        router.get("ready", use: ready)
        router.get("openapi.yaml") { _, _ in
            guard let url = Bundle.module.url(forResource: "openapi", withExtension: "yaml"),
                let data = try? Data(contentsOf: url)
            else { throw APIError.notFound("the OpenAPI document is missing from the build") }
            return Response(
                status: .ok, headers: [.contentType: "application/yaml; charset=utf-8"],
                body: .init(byteBuffer: .init(bytes: Array(data))))
        }
        router.get("metrics") { [cache, readRouter] _, _ in
            if let registry, let cache { Self.report(cache, into: registry) }
            if let registry, let readRouter { Self.report(readRouter, into: registry) }
            return Response(
                status: .ok, headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8"],
                body: .init(byteBuffer: .init(bytes: registry?.emitToBuffer() ?? [])))
        }
    }

    /// The entitlement cache's figures as gauges, read when scraped.
    static func report(_ cache: LedgerCache, into registry: PrometheusCollectorRegistry) {
        let stats = cache.statistics
        func gauge(_ name: String, _ help: String) -> Gauge {
            registry.makeGauge(
                descriptor: MetricNameDescriptor(
                    namespace: "subledger", subsystem: "entitlement_cache", metricName: name, unitName: "", helpText: help))
        }
        gauge("subscribers", "Subscribers whose ledgers the entitlement cache holds.").set(to: Double(stats.subscribers))
        gauge("bytes", "Estimated bytes the entitlement cache holds.").set(to: Double(stats.bytes))
        gauge("hits", "Entitlement and window reads answered from the cache.").set(to: Double(stats.hits))
        gauge("misses", "Entitlement and window reads that went to PostgreSQL.").set(to: Double(stats.misses))
        gauge("enabled", "1 while the cache serves reads (its LISTEN is in place), else 0.").set(to: cache.isEnabled ? 1 : 0)
    }

    /// Where reads ran, and how far each replica is, as gauges read when scraped.
    static func report(_ router: ReadRouter, into registry: PrometheusCollectorRegistry) {
        let stats = router.statistics
        registry.makeGauge(name: "subledger_reads_primary").set(to: Double(stats.primary))
        registry.makeGauge(name: "subledger_reads_replica").set(to: Double(stats.replica))
        registry.makeGauge(name: "subledger_reads_replica_fallback").set(to: Double(stats.fallback))
        for replica in router.replicaStates {
            registry.makeGauge(name: "subledger_replica_position", labels: [("replica", replica.name)]).set(to: Double(replica.position))
            registry.makeGauge(name: "subledger_replica_up", labels: [("replica", replica.name)]).set(to: replica.down ? 0 : 1)
        }
    }

    @Sendable func ready(_ request: Request, context: LedgerRequestContext) async throws -> Response {
        do {
            let status = try await migrations.status()
            if let why = status.refusal {
                return .json(["status": "not_ready", "database": "reachable", "schema": .string(why)], status: .serviceUnavailable)
            }
            var body: [String: JSONValue] = ["status": "ready", "database": "reachable", "schema": "current"]
            for case (let name, let value)? in stores.map({ $0.readiness() }) { body[name] = value }
            return .json(.object(body))
        } catch {
            let reason: String =
                switch StoreError.classify(error) {
                case let e as StoreError: "\(e)"
                default: "the database did not answer"
                }
            return .json(["status": "not_ready", "database": .string(reason)], status: .serviceUnavailable)
        }
    }
}
