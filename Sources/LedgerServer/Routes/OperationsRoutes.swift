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
        registry.makeGauge(name: "subledger_entitlement_cache_subscribers").set(to: Double(stats.subscribers))
        registry.makeGauge(name: "subledger_entitlement_cache_bytes").set(to: Double(stats.bytes))
        registry.makeGauge(name: "subledger_entitlement_cache_hits").set(to: Double(stats.hits))
        registry.makeGauge(name: "subledger_entitlement_cache_misses").set(to: Double(stats.misses))
        registry.makeGauge(name: "subledger_entitlement_cache_enabled").set(to: cache.isEnabled ? 1 : 0)
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
            guard status.isCurrent else {
                let why = status.problems.first.map { "\($0)" } ?? "\(status.pending.count) migration(s) pending: run subledger migrate"
                return .json(["status": "not_ready", "database": "reachable", "schema": .string(why)], status: .serviceUnavailable)
            }
            return .json(["status": "ready", "database": "reachable", "schema": "current"])
        } catch {
            let reason: String = switch StoreError.classify(error) {
            case let e as StoreError: "\(e)"
            default: "the database did not answer"
            }
            return .json(["status": "not_ready", "database": .string(reason)], status: .serviceUnavailable)
        }
    }
}
