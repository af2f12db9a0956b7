import Metrics
import Prometheus

/// The test process's metrics: swift-metrics takes one factory per process, so every test that reads metrics
/// (Hummingbird's request counters, the webhook gauges) shares this registry, bootstrapped on first use.
public enum TestMetrics {
    public static let registry: PrometheusCollectorRegistry = {
        let registry = PrometheusCollectorRegistry()
        MetricsSystem.bootstrap(PrometheusMetricsFactory(registry: registry))
        return registry
    }()

    /// What `/metrics` would show now.
    public static func text() -> String {
        var buffer: [UInt8] = []
        registry.emit(into: &buffer)
        return String(decoding: buffer, as: UTF8.self)
    }
}
