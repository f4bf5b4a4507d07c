/// How a kind of device is named and which options its string takes, for `viewfinder devices`
/// (and its `--json`) and the documentation.
public struct DeviceKindDocumentation: Sendable, Codable, Equatable {
    /// How the device string is written (`sim[:key=value,…]`).
    public var syntax: String
    /// One line on the kind of device.
    public var summary: String
    /// Every option, with its unit, range and default (from the kind's ``DeviceOptionTable``).
    public var options: [OptionDocumentation]

    public init(syntax: String, summary: String, options: [OptionDocumentation]) {
        self.syntax = syntax; self.summary = summary; self.options = options
    }

    /// The documentation of a kind whose options are the table `T`.
    public init<T: DeviceOptionTable>(syntax: String, summary: String, options: T.Type) {
        self.init(syntax: syntax, summary: summary, options: T.documentation)
    }
}

/// A provider that documents its device strings.
public protocol DocumentedDeviceProvider: DeviceProvider {
    var documentation: DeviceKindDocumentation { get }
}

extension DeviceDirectory {
    /// The documentation of every kind of device the directory opens that documents itself.
    public var kinds: [DeviceKindDocumentation] {
        providers.compactMap { ($0 as? any DocumentedDeviceProvider)?.documentation }
    }
}
