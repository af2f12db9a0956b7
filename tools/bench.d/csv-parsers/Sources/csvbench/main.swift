import CSV
import Foundation
import SwiftCSV

let path = CommandLine.arguments[1]
let data = try Data(contentsOf: URL(fileURLWithPath: path))
func time(_ name: String, _ body: () throws -> Int) rethrows {
    let t0 = Date()
    let n = try body()
    let s = Date().timeIntervalSince(t0)
    print("\(name): \(n) records, \(String(format: "%.2f", s)) s, \(Int(Double(n) / s)) records/s")
}
for _ in 0..<2 {
    try time("own CSVRecordReader (streaming, 1 MiB chunks)") {
        let bytes = [UInt8](data)
        var offset = 0
        var reader = CSVRecordReader {
            defer { offset = min(offset + (1 << 20), bytes.count) }
            return Array(bytes[offset..<min(offset + (1 << 20), bytes.count)])
        }
        var n = 0
        var f = 0
        while let r = try reader.next() { n += 1; f += r.fields.count }
        return n
    }
    try time("yaslab/CSV.swift 2.5.2 CSVReader (streaming)") {
        let stream = InputStream(data: data)
        let reader = try CSVReader(stream: stream, hasHeaderRow: false)
        var n = 0
        while let row = reader.next() { n += 1; _ = row.count }
        return n
    }
    try time("swiftcsv/SwiftCSV 0.10.0 (whole file in memory)") {
        let text = String(decoding: data, as: UTF8.self)
        let csv = try CSV<Enumerated>(string: text, loadColumns: false)
        return csv.rows.count + 1
    }
}
