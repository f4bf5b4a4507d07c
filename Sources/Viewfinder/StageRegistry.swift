import Foundation

/// The stages a program knows, by name. Built from the registries the `StageRegistryPlugin`
/// generates for each target that applies it (`StageRegistry.<module>`), merged as needed.
public struct StageRegistry: Sendable {
    public private(set) var types: [String: any Stage.Type]

    public init(_ types: [any Stage.Type]) {
        var d: [String: any Stage.Type] = [:]
        for t in types { d[t.name] = t }
        self.types = d
    }

    /// Both registries together; a name in both is an error.
    public func merging(_ other: StageRegistry) throws -> StageRegistry {
        var r = self
        for (n, t) in other.types {
            if let existing = r.types[n], ObjectIdentifier(existing) != ObjectIdentifier(t) { throw ConfigurationError.duplicateStage(n) }
            r.types[n] = t
        }
        return r
    }

    public var names: [String] { types.keys.sorted() }

    public func type(named name: String) throws -> any Stage.Type {
        guard let t = types[name] else { throw ConfigurationError.unknownStage(name, known: names) }
        return t
    }

    /// Builds a stage by name from untyped options.
    public func makeStage(_ spec: StageSpec) throws -> any Stage {
        try type(named: spec.name).make(options: spec.options)
    }
}

/// A stage by name with untyped options, as in a pipeline file or on the command line.
public struct StageSpec: Sendable, Equatable, Codable {
    public var name: String
    public var options: [String: JSONValue]
    /// A disabled stage is left out of the chain (as in libcamera tuning files).
    public var enabled: Bool

    public init(name: String, options: [String: JSONValue] = [:], enabled: Bool = true) {
        self.name = name; self.options = options; self.enabled = enabled
    }

    enum CodingKeys: String, CodingKey { case name, options, enabled }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        name = try c.decode(String.self, forKey: .name)
        options = try c.decodeIfPresent([String: JSONValue].self, forKey: .options) ?? [:]
        enabled = try c.decodeIfPresent(Bool.self, forKey: .enabled) ?? true
    }

    /// Parses a command-line list: `exposure:mode=auto:bias=0.3,focus,deadline:max_age_ms=50`.
    /// Stages are separated by `,`; options follow the name after `:` as `key=value`.
    public static func parseList(_ text: String) throws -> [StageSpec] {
        try text.split(separator: ",", omittingEmptySubsequences: true).map { item in
            let parts = item.split(separator: ":", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces) }
            guard let name = parts.first, !name.isEmpty else { throw ConfigurationError.unknownStage("", known: []) }
            var options: [String: JSONValue] = [:]
            for p in parts.dropFirst() {
                guard let eq = p.firstIndex(of: "="), eq != p.startIndex else {
                    throw ConfigurationError.invalidOption(stage: name, option: p, reason: "expected key=value")
                }
                options[String(p[..<eq])] = JSONValue(commandLine: String(p[p.index(after: eq)...]))
            }
            return StageSpec(name: name, options: options)
        }
    }
}

/// A pipeline as a JSON file describes it.
///
/// ```json
/// { "device": "sim:width=1280,height=720",
///   "stages": [ { "name": "exposure", "options": { "mode": "continuous" } },
///               { "name": "focus", "enabled": false } ] }
/// ```
public struct PipelineConfiguration: Sendable, Equatable, Codable {
    public var device: String?
    public var stages: [StageSpec]
    public init(device: String? = nil, stages: [StageSpec]) { self.device = device; self.stages = stages }

    enum CodingKeys: String, CodingKey, CaseIterable { case device, stages }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        device = try c.decodeIfPresent(String.self, forKey: .device)
        stages = try c.decodeIfPresent([StageSpec].self, forKey: .stages) ?? []
    }

    /// Reads a pipeline file; every problem is a ``ConfigurationError/invalidConfigFile(path:reason:)``.
    public static func load(path: String) throws -> PipelineConfiguration {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw ConfigurationError.invalidConfigFile(path: path, reason: "cannot read the file")
        }
        let top: JSONValue
        do { top = try JSONDecoder().decode(JSONValue.self, from: data) } catch {
            throw ConfigurationError.invalidConfigFile(path: path, reason: "not valid JSON (\(Self.describe(error)))")
        }
        guard case .object(let obj) = top else {
            throw ConfigurationError.invalidConfigFile(path: path, reason: "the top level must be an object with \"stages\"")
        }
        for key in obj.keys where CodingKeys(rawValue: key) == nil {
            throw ConfigurationError.invalidConfigFile(path: path, reason: "unknown key '\(key)' (expected: device, stages)")
        }
        if case .array(let items)? = obj["stages"] {
            for (i, item) in items.enumerated() {
                guard case .object(let o) = item else {
                    throw ConfigurationError.invalidConfigFile(path: path, reason: "stages[\(i)] must be an object with \"name\"")
                }
                guard case .string? = o["name"] else {
                    throw ConfigurationError.invalidConfigFile(path: path, reason: "stages[\(i)] has no \"name\"")
                }
                for k in o.keys where !["name", "options", "enabled"].contains(k) {
                    throw ConfigurationError.invalidConfigFile(path: path, reason: "stages[\(i)]: unknown key '\(k)' (expected: name, options, enabled)")
                }
            }
        }
        do { return try JSONDecoder().decode(PipelineConfiguration.self, from: data) } catch {
            throw ConfigurationError.invalidConfigFile(path: path, reason: Self.describe(error))
        }
    }

    static func describe(_ error: any Error) -> String {
        switch error {
        case DecodingError.typeMismatch(let t, let c), DecodingError.valueNotFound(let t, let c):
            return "expected \(t) at \(c.codingPath.map(\.stringValue).joined(separator: "."))"
        case DecodingError.keyNotFound(let k, _): return "missing key '\(k.stringValue)'"
        case DecodingError.dataCorrupted(let c):
            return c.underlyingError.map { "\($0.localizedDescription)" } ?? c.debugDescription
        default: return "\(error)"
        }
    }
}
