import Foundation

/// A JSON value, as stage options and pipeline files carry them.
public enum JSONValue: Sendable, Equatable, Codable, CustomStringConvertible {
    case null
    case bool(Bool)
    case number(Double)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])

    public init(from decoder: any Decoder) throws {
        let c = try decoder.singleValueContainer()
        if c.decodeNil() { self = .null }
        else if let b = try? c.decode(Bool.self) { self = .bool(b) }
        else if let d = try? c.decode(Double.self) { self = .number(d) }
        else if let s = try? c.decode(String.self) { self = .string(s) }
        else if let a = try? c.decode([JSONValue].self) { self = .array(a) }
        else { self = .object(try c.decode([String: JSONValue].self)) }
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.singleValueContainer()
        switch self {
        case .null: try c.encodeNil()
        case .bool(let b): try c.encode(b)
        case .number(let d): try c.encode(d)
        case .string(let s): try c.encode(s)
        case .array(let a): try c.encode(a)
        case .object(let o): try c.encode(o)
        }
    }

    public var description: String {
        switch self {
        case .null: return "null"
        case .bool(let b): return String(b)
        case .number(let d): return fmt(d)
        case .string(let s): return s
        case .array(let a): return "[" + a.map(\.description).joined(separator: ",") + "]"
        case .object(let o): return "{" + o.sorted(by: { $0.key < $1.key }).map { "\($0.key)=\($0.value)" }.joined(separator: ",") + "}"
        }
    }

    /// Interprets a command-line word: `true`/`false`, a number, a list `a/b`, else a string.
    ///
    /// The list is found by the same split that makes it (by Character): a `/` that a combining
    /// mark joins to the next character (`/` + U+0940) is not a separator. Testing with
    /// Foundation's `contains("/")`, which finds the scalar, and then splitting by Character,
    /// which does not, recursed on the same word until the stack overflowed (FuzzPipeline).
    public init(commandLine word: String) {
        if word == "true" { self = .bool(true) }
        else if word == "false" { self = .bool(false) }
        else if let d = Double(word) { self = .number(d) }
        else {
            let items = word.split(separator: "/", omittingEmptySubsequences: false)
            self = items.count > 1 ? .array(items.map { JSONValue(commandLine: String($0)) }) : .string(word)
        }
    }
}

/// A JSON decoding error in the words of the file or request a person wrote: where (the key path
/// as the JSON spells it, `stages[0].enabled`, snake_case when `snakeCase`) and what was wrong
/// (`true or false`, `a number`), without Swift's type names or coding-key dumps.
package func jsonDecodingFailure(_ error: any Error, snakeCase: Bool = false) -> String {
    guard let e = error as? DecodingError else { return "\(error)" }
    func name(_ key: String) -> String {
        guard snakeCase else { return key }
        var out = ""
        for c in key {
            if c.isUppercase { out += "_" + c.lowercased() } else { out.append(c) }
        }
        return out
    }
    func path(_ keys: [any CodingKey]) -> String {
        var s = ""
        for k in keys {
            if let i = k.intValue { s += "[\(i)]" } else { s += (s.isEmpty ? "" : ".") + name(k.stringValue) }
        }
        return s
    }
    func at(_ keys: [any CodingKey]) -> String { keys.isEmpty ? "the top level" : "'\(path(keys))'" }
    func kind(_ t: Any.Type) -> String {
        switch t {
        case is Bool.Type: return "true or false"
        case is String.Type: return "a string"
        case is Int.Type, is Int64.Type, is Int32.Type, is UInt64.Type, is UInt32.Type, is UInt.Type, is Double.Type, is Float.Type: return "a number"
        default:
            let n = String(describing: t)
            return n.hasPrefix("Array") || n.hasPrefix("[") ? "a list" : "an object"
        }
    }
    switch e {
    case .keyNotFound(let k, let c): return "\(at(c.codingPath + [k])) is missing"
    case .typeMismatch(let t, let c): return "\(at(c.codingPath)) must be \(kind(t))"
    case .valueNotFound(let t, let c): return "\(at(c.codingPath)) is null where \(kind(t)) belongs"
    case .dataCorrupted(let c):
        if c.codingPath.isEmpty {
            let detail = (c.underlyingError as NSError?)?.userInfo[NSDebugDescriptionErrorKey].map { "\($0)" }
            return "not valid JSON" + (detail.map { " (\($0))" } ?? "")
        }
        return "\(at(c.codingPath)): \(c.debugDescription)"
    @unknown default: return "\(error)"
    }
}
