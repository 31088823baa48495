//! A suite's report in the JUnit XML format CI systems show (feature `junit`).

use std::io;
use std::path::Path;
use std::time::Duration;

use quick_xml::Writer;
use quick_xml::events::{BytesDecl, BytesText, Event as XmlEvent};

use crate::transcript::{FileResult, Outcome, SuiteReport};

impl SuiteReport {
    /// The report in the JUnit XML format CI systems show: one test suite, one test case per
    /// file, a `failure` for a divergence (its headline as the message, the whole report with
    /// the diff as the text) and an `error` for a file that could not be read.
    pub fn to_junit(&self) -> String {
        let mut writer = Writer::new_with_indent(Vec::new(), b' ', 2);
        // Writing into a Vec cannot fail.
        let _ = self.write_junit(&mut writer);
        String::from_utf8_lossy(&writer.into_inner()).into_owned()
    }

    /// Writes [`Self::to_junit`]'s report to `path`, created mode 0600 as transcripts are: a
    /// divergence's diff quotes what the session said.
    pub fn save_junit(&self, path: &Path) -> io::Result<()> {
        crate::private::write_file(path, self.to_junit())
    }

    fn write_junit(&self, writer: &mut Writer<Vec<u8>>) -> io::Result<()> {
        writer.write_event(XmlEvent::Decl(BytesDecl::new("1.0", Some("UTF-8"), None)))?;
        let tests = self.results.len().to_string();
        let failures = (self.diverged() + self.not_whole()).to_string();
        let errors = self.unreadable().to_string();
        let time = seconds(self.elapsed);
        let attributes = [
            ("name", "hookloop replay"),
            ("tests", tests.as_str()),
            ("failures", failures.as_str()),
            ("errors", errors.as_str()),
            ("time", time.as_str()),
        ];
        writer
            .create_element("testsuites")
            .with_attributes(attributes)
            .write_inner_content(|writer| {
                writer
                    .create_element("testsuite")
                    .with_attributes(attributes)
                    .write_inner_content(|writer| {
                        for result in &self.results {
                            write_case(writer, result)?;
                        }
                        Ok(())
                    })?;
                Ok(())
            })?;
        Ok(())
    }
}

fn write_case(writer: &mut Writer<Vec<u8>>, result: &FileResult) -> io::Result<()> {
    let name = result.path.display().to_string();
    let time = seconds(result.elapsed);
    let case = writer
        .create_element("testcase")
        .with_attribute(("classname", "hookloop.replay"))
        .with_attribute(("name", name.as_str()))
        .with_attribute(("time", time.as_str()));
    match &result.outcome {
        Outcome::Passed(_) => {
            case.write_empty()?;
        }
        Outcome::Diverged(divergence) => {
            let text = divergence.to_string();
            let headline = text.lines().next().unwrap_or_default();
            case.write_inner_content(|writer| {
                writer
                    .create_element("failure")
                    .with_attribute(("type", "divergence"))
                    .with_attribute(("message", headline))
                    .write_text_content(BytesText::new(&text))?;
                Ok(())
            })?;
        }
        Outcome::NotWhole(report) => {
            let text = report.incompleteness().unwrap_or_default();
            case.write_inner_content(|writer| {
                writer
                    .create_element("failure")
                    .with_attribute(("type", "not_whole"))
                    .with_attribute(("message", text.as_str()))
                    .write_text_content(BytesText::new(&text))?;
                Ok(())
            })?;
        }
        Outcome::Unreadable(message) => {
            case.write_inner_content(|writer| {
                writer
                    .create_element("error")
                    .with_attribute(("type", "unreadable"))
                    .with_attribute(("message", message.as_str()))
                    .write_text_content(BytesText::new(message))?;
                Ok(())
            })?;
        }
    }
    Ok(())
}

fn seconds(duration: Duration) -> String {
    format!("{:.3}", duration.as_secs_f64())
}
