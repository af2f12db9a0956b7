import Crypto
import Foundation
import LedgerCore

/// One numbered SQL file of `schema/` (`0001_event_store.sql`), read from the project's `schema/` folder (see `directory`).
public struct Migration: Sendable, Hashable {
    public var version: Int
    public var name: String
    public var sql: String
    /// SHA-256 of the file's bytes, recorded when applied: an applied file must never change.
    public var checksum: String

    public init(version: Int, name: String, sql: String) {
        self.version = version
        self.name = name
        self.sql = sql
        self.checksum = Hex.encode(SHA256.hash(data: Array(sql.utf8)))
    }

    /// The project's `schema/` folder: `$SUBLEDGER_SCHEMA_DIR`, else the nearest `schema/` above the
    /// executable (a checkout's `.build/…/subledger`), else `./schema`.
    public static func schemaDirectory(environment: [String: String] = ProcessInfo.processInfo.environment) throws -> URL {
        let fm = FileManager.default
        if let dir = environment["SUBLEDGER_SCHEMA_DIR"], !dir.isEmpty {
            return URL(fileURLWithPath: dir)
        }
        var starts: [URL] = []
        if let exe = Bundle.main.executableURL { starts.append(exe.resolvingSymlinksInPath().deletingLastPathComponent()) }
        starts.append(URL(fileURLWithPath: fm.currentDirectoryPath))
        for start in starts {
            var dir = start
            while true {
                let candidate = dir.appendingPathComponent("schema")
                if fm.fileExists(atPath: candidate.appendingPathComponent("0001_event_store.sql").path) { return candidate }
                let parent = dir.deletingLastPathComponent()
                if parent.path == dir.path { break }
                dir = parent
            }
        }
        throw MigrationError.missingSchema
    }

    /// Reads `NNNN_name.sql` files from a directory; any other `.sql` name is an error, not skipped.
    public static func load(directory: URL) throws -> [Migration] {
        let files = try FileManager.default.contentsOfDirectory(atPath: directory.path).filter { $0.hasSuffix(".sql") }
        var migrations: [Migration] = []
        for file in files {
            let stem = file.dropLast(4)
            let parts = stem.split(separator: "_", maxSplits: 1)
            guard parts.count == 2, parts[0].count == 4, let version = Int(parts[0]), version > 0 else {
                throw MigrationError.badFileName(file)
            }
            let sql = try String(contentsOf: directory.appendingPathComponent(file), encoding: .utf8)
            migrations.append(Migration(version: version, name: String(parts[1]), sql: sql))
        }
        migrations.sort { $0.version < $1.version }
        for (a, b) in zip(migrations, migrations.dropFirst()) where a.version == b.version {
            throw MigrationError.duplicateVersion(a.version)
        }
        return migrations
    }
}

public enum MigrationError: Error, CustomStringConvertible {
    case missingSchema
    case missingFunctions(String)
    case badFileName(String)
    case badFunctionFile(String, String)
    case duplicateVersion(Int)
    case edited(version: Int, name: String)
    case unknownApplied(version: Int, name: String)
    case failed(version: Int, name: String, statement: String, underlying: String)
    case functionFailed(name: String, statement: String, underlying: String)

    public var description: String {
        switch self {
        case .missingSchema:
            "cannot find the schema/ folder of migrations: run from a checkout or set SUBLEDGER_SCHEMA_DIR"
        case .missingFunctions(let path): "cannot find the SQL functions folder \(path) (schema/functions beside the migrations)"
        case .badFileName(let f): "migration file \(f) is not named NNNN_name.sql"
        case .badFunctionFile(let f, let why): "function file schema/functions/\(f): \(why)"
        case .duplicateVersion(let v): "two migration files have number \(v)"
        case .edited(let v, let n):
            "migration \(String(format: "%04d", v))_\(n).sql was edited after it was applied (its checksum differs); "
                + "applied migrations must never change: restore the file and add a new migration instead"
        case .unknownApplied(let v, let n):
            "the database has migration \(String(format: "%04d", v))_\(n) applied, which this binary does not know: it is older than the schema"
        case .failed(let v, let n, let statement, let underlying):
            "migration \(String(format: "%04d", v))_\(n).sql failed (nothing was applied): \(underlying)\n  in: \(statement.prefix(200))"
        case .functionFailed(let name, let statement, let underlying):
            "schema/functions/\(name).sql failed (nothing was applied): \(underlying)\n  in: \(statement.prefix(200))"
        }
    }
}
